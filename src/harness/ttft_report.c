/*
 * ttft_report.c — the results of `mzcache bench ttft`: CSV, the markdown table
 * with the speedup of mzcache over each baseline (joined with
 * bench/peer_llamacpp.py results when given) and gnuplot PNGs.
 */
#define _GNU_SOURCE

#include "ttft_impl.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* ---- output ------------------------------------------------------------------------- */

static void fmt_runs(const ttft_row *r, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < r->n_runs && n + 16 < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%.3f", k ? " " : "", r->ttft[k]);
}

int ttft_write_csv(const char *path, const char *stamp)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "date,model,ctx,context,mode,codec,order,overlap,level,remaining_pct,remaining_min,"
               "remaining_max,in_tol,ttft_s,runs_s,n_runs,lower_bound_s,ttft_over_bound,restore_mib,"
               "evict_ms,alloc_ms,storage_ms,mem_ms,all_ready_ms,stall_ms,prefill_ms,"
               "cached_kib_max,load_min,load_max,note,remaining_at_restore_pct,placement,zram_algo,"
               "zram_orig_mib,zram_compr_mib,zram_used_mib,disk_floor_s,ttft_over_disk_floor,next_token_ms\n");
    for (size_t i = 0; i < ttft_rows.n; i++) {
        const ttft_row *r = &ttft_rows.v[i];
        char runs[MZ_TTFT_MAX_RUNS * 10];
        fmt_runs(r, runs, sizeof runs);
        fprintf(f,
                "%s,%s,%d,synthetic,%s,%s,%s,%s,%d,%.2f,%.2f,%.2f,%d,%.4f,%s,%d,%.4f,%.2f,%.1f,%.1f,"
                "%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.0f,%.2f,%.2f,\"%s\",%.2f,%s,%s,%.1f,%.1f,%.1f,%.4f,%.2f,%.1f\n",
                stamp, r->model, r->n_ctx, r->mode, r->codec, r->order, r->overlap, r->level,
                r->remaining_med, r->remaining_min, r->remaining_max, r->in_tol, r->ttft_med, runs,
                r->n_runs, r->bound_s, r->ttft_med / r->bound_s, r->restore_mib, r->evict_ms,
                r->alloc_ms, r->storage_ms, r->mem_ms, r->restore_ms, r->stall_ms, r->prefill_ms,
                r->cached_kib_max, isfinite(r->load_min) ? r->load_min : 0.0,
                isfinite(r->load_max) ? r->load_max : 0.0, r->note, r->remaining_restore_med,
                r->placement[0] ? r->placement : "-", r->zram_algo[0] ? r->zram_algo : "-",
                r->zram_orig_mib, r->zram_compr_mib, r->zram_used_mib, r->disk_floor_s,
                r->disk_floor_s > 0 ? r->ttft_med / r->disk_floor_s : 0.0, r->next_ms);
    }
    fclose(f);
    return 0;
}

/* A row's codec is the one asked for, or "auto:<chosen>" where auto was. */
static bool codec_matches(const char *row_codec, const char *asked)
{
    size_t n = strlen(asked);
    return strncmp(row_codec, asked, n) == 0 && (row_codec[n] == '\0' || row_codec[n] == ':');
}

static const ttft_row *find_row(const char *model, int n_ctx, const char *mode, const char *codec,
                                 const char *order, const char *overlap, int level)
{
    for (size_t i = 0; i < ttft_rows.n; i++) {
        const ttft_row *r = &ttft_rows.v[i];
        if (r->skipped || strcmp(r->model, model) || r->n_ctx != n_ctx || strcmp(r->mode, mode))
            continue;
        if (codec && !codec_matches(r->codec, codec)) continue;
        if (order && strcmp(r->order, order)) continue;
        if (overlap && strcmp(r->overlap, overlap)) continue;
        if (r->level == level || (level >= 0 && r->level == -1)) return r; /* -1: any level */
    }
    return NULL;
}

/* Peer results (bench/peer_llamacpp.py CSV): model,ctx,metric,median_s,... */
typedef struct peer_row {
    char model[96], metric[24], note[96];
    int n_ctx;
    double med;
} peer_row;

/* A whole field as a number in [min, max] (no white space, no trailing text);
 * integral: no fraction or exponent either. */
static bool peer_num(const char *s, double min, double max, bool integral, double *out)
{
    if (!s[0] || isspace((unsigned char)s[0])) return false;
    char *end = NULL;
    errno = 0;
    double v = integral ? (double)strtoll(s, &end, 10) : strtod(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max)) return false;
    *out = v;
    return true;
}

static int read_peer(const char *path, peer_row *out, int cap)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[1024];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { fclose(f); return 0; } /* header */
    while (n < cap && fgets(line, sizeof line, f)) {
        char *save = NULL, *fld[8] = {0};
        int k = 0;
        for (char *t = strtok_r(line, ",\n", &save); t && k < 8; t = strtok_r(NULL, ",\n", &save))
            fld[k++] = t;
        /* date,model,ctx,metric,median_s,runs_s,context,load */
        if (k < 5) continue;
        peer_row *p = &out[n++];
        snprintf(p->model, sizeof p->model, "%s", fld[1]);
        double ctx_d = 0, med = 0;
        if (!peer_num(fld[2], 0, INT_MAX, true, &ctx_d) || !peer_num(fld[4], 0, 1e9, false, &med)) {
            n--; /* not a result row */
            continue;
        }
        p->n_ctx = (int)ctx_d;
        snprintf(p->metric, sizeof p->metric, "%s", fld[3]);
        p->med = med;
        snprintf(p->note, sizeof p->note, "%s", k > 6 ? fld[6] : "");
    }
    fclose(f);
    return n;
}

static const char *k_baselines[] = {"os-paging", "partial-offload", "recompute"};

int ttft_write_md(const char *path, const mz_ttft_opts *o, const char *stamp, const char *cmdline,
                    const char *plots)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    struct utsname u;
    uname(&u);
    char cpu[128] = "?";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (ci && fgets(line, sizeof line, ci))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) snprintf(cpu, sizeof cpu, "%s", p + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (ci) fclose(ci);
    fprintf(f, "# %s\n\n", o->title ? o->title : "TTFT after eviction (mzcache bench ttft)");
    fprintf(f, "%s, %s (%ld CPUs, kernel %s), %d compute threads, %d-token query, median of %d "
               "(recompute: %d), remaining tolerance -%.0f %%.\n\n",
            stamp, cpu, sysconf(_SC_NPROCESSORS_ONLN), u.release, o->threads, o->query, o->runs,
            o->recompute_runs, o->tol);
    fprintf(f, "Command: `%s`\n\n", cmdline);
    fprintf(f, "Contexts are SYNTHETIC: K/V written into the KV chunks by the calibrated fill "
               "(src/harness/kv_fill.c: per-channel value distributions of a real 512-token prefill of "
               "the same model, so lz4/zstd/q8 compress them as real KV). "
               "Page cache of the model and swap files dropped and checked (mincore) before every "
               "restore; `cached` = KiB still cached (max over runs). `load` = 1-min load average "
               "during the point (2 vCPUs: above ~2.5 means other programs took CPU). "
               "`bound` = max(in-memory TTFT, restore bytes / combined path throughput of the "
               "device profile). `disk floor` = the stored chunks and dropped weight blocks read "
               "at the device profile's rates (no restore from that placement is faster); "
               "`x floor` = TTFT / disk floor. Level 0 is each mode's **full eviction**: everything is asked and "
               "each mode evicts all it can; its remaining %% is what it could not give back.\n\n");
    /* zram: what it held, and why (os-paging with --zram). */
    for (size_t i = 0; i < ttft_rows.n; i++) {
        const ttft_row *r = &ttft_rows.v[i];
        if (r->skipped || !r->zram_algo[0]) continue;
        fprintf(f, "os-paging swapped its KV to a zram device (%s; this kernel's zram offers "
                   "lzo/lzo-rle/lz4, no zstd). zram keeps what it is given in RAM, compressed, so "
                   "those bytes count as remaining: os-paging's full eviction leaves the KV's "
                   "compressed size. What the device held after os-paging's evictions (mm_stat, "
                   "median of the runs):\n\n",
                r->zram_algo);
        fprintf(f, "| model | ctx | level | zram original MiB | compressed MiB | compressed / "
                   "original | memory used MiB | os-paging remaining %% |\n|---|---|---|---|---|---|---|---|\n");
        for (size_t j = i; j < ttft_rows.n; j++) {
            const ttft_row *z = &ttft_rows.v[j];
            if (z->skipped || !z->zram_algo[0]) continue;
            fprintf(f, "| %s | %d | %d%s | %.0f | %.0f | %.1f %% | %.0f | %.1f |\n", z->model,
                    z->n_ctx, z->level, z->level == 0 ? " (full eviction)" : "", z->zram_orig_mib,
                    z->zram_compr_mib,
                    z->zram_orig_mib > 0 ? 100.0 * z->zram_compr_mib / z->zram_orig_mib : 0.0,
                    z->zram_used_mib, z->remaining_med);
        }
        fprintf(f, "\nThe contexts are the calibrated fill (src/harness/kv_fill.c), which lz4 treats as "
                   "real KV (lz4 in 4 KiB pages saves 0.22 %% on real SmolLM2 KV, docs/CODECS.md, "
                   "Table 2; test_kv_fill checks the fill within 2 points), so zram holds about all "
                   "of the KV it is given.\n\n");
        break;
    }

    /* Main comparison: per model/ctx/level, mzcache (first config) vs baselines. */
    peer_row peer[256];
    int n_peer = read_peer(o->peer_csv, peer, 256);
    const char *c0 = o->codecs[0], *o0 = o->orders[0], *v0 = o->overlaps[0];
    fprintf(f, "## TTFT (s) and speedup of mzcache over each baseline\n\n");
    fprintf(f, "mzcache = codec %s, order %s, overlap %s. Speedup = baseline TTFT / mzcache TTFT "
               "(> 1: mzcache faster).\n\n", c0, o0, v0);
    fprintf(f, "| model | ctx | level | mzcache rem. %% | mzcache | bound | x bound | disk floor | x floor |");
    for (size_t b = 0; b < 3; b++) fprintf(f, " %s | speedup |", k_baselines[b]);
    fprintf(f, " cached KiB | load |\n|---|---|---|---|---|---|---|---|---|");
    for (size_t b = 0; b < 3; b++) fprintf(f, "---|---|");
    fprintf(f, "---|---|\n");
    for (int mi = 0; mi < o->n_models; mi++)
        for (int ci2 = 0; ci2 < o->n_ctxs; ci2++) {
            const ttft_row *any = NULL;
            for (size_t i = 0; i < ttft_rows.n && !any; i++)
                if (!strcmp(ttft_rows.v[i].model, o->models[mi]) && ttft_rows.v[i].n_ctx == o->ctxs[ci2])
                    any = &ttft_rows.v[i];
            if (!any) continue;
            const ttft_row *im = find_row(o->models[mi], o->ctxs[ci2], "mzcache", NULL, NULL, NULL, 100);
            if (im)
                fprintf(f, "| %s | %d | 100 (in memory) | 100 | %.3f | | | | | | | | | | | 0 | %.1f |\n",
                        o->models[mi], o->ctxs[ci2], im->ttft_med, im->load_max);
            for (int li = 0; li < o->n_levels; li++) {
                int lv = o->levels[li];
                const ttft_row *mz = find_row(o->models[mi], o->ctxs[ci2], "mzcache", c0, o0, v0, lv);
                fprintf(f, "| %s | %d | %d%s |", o->models[mi], o->ctxs[ci2], lv,
                        lv == 0 ? " (full eviction)" : "");
                if (mz)
                {
                    fprintf(f, " %.1f%s | %.3f | %.3f | %.2f |", mz->remaining_med,
                            mz->in_tol ? "" : " (!)", mz->ttft_med, mz->bound_s,
                            mz->ttft_med / mz->bound_s);
                    if (mz->disk_floor_s > 0)
                        fprintf(f, " %.3f | %.2f |", mz->disk_floor_s, mz->ttft_med / mz->disk_floor_s);
                    else
                        fprintf(f, " 0 | - |");
                } else
                    fprintf(f, " - | - | - | - | - | - |");
                double cached = mz ? mz->cached_kib_max : 0, load = mz ? mz->load_max : 0;
                for (size_t b = 0; b < 3; b++) {
                    const ttft_row *br =
                        find_row(o->models[mi], o->ctxs[ci2], k_baselines[b], NULL, NULL, NULL, lv);
                    if (!br) {
                        fprintf(f, " - | - |");
                        continue;
                    }
                    if (br->cached_kib_max > cached) cached = br->cached_kib_max;
                    if (br->load_max > load) load = br->load_max;
                    char rem[32] = "";
                    if (!br->in_tol && br->level >= 0)
                        snprintf(rem, sizeof rem, " (rem. %.0f %% !)", br->remaining_med);
                    else if (br->level == 0)
                        snprintf(rem, sizeof rem, " (rem. %.1f %%)", br->remaining_med);
                    if (mz)
                        fprintf(f, " %.3f%s%s | **%.2fx** |", br->ttft_med,
                                br->level == -1 ? "*" : "", rem, br->ttft_med / mz->ttft_med);
                    else
                        fprintf(f, " %.3f%s%s | - |", br->ttft_med, br->level == -1 ? "*" : "", rem);
                }
                fprintf(f, " %.0f | %.1f |\n", cached, load);
            }
        }
    fprintf(f, "\n`*` recompute does not depend on the level (everything is dropped): measured once "
               "per context and repeated. `(!)` remaining outside [level - tol, level] "
               "(the mode did not give back the memory asked for; its TTFT is then not comparable). "
               "At level 0 (full eviction) every mode's remaining %% is shown instead.\n");

    /* Full eviction: each mode evicts all it can; compared as such. */
    bool any_full = false;
    for (int li = 0; li < o->n_levels; li++) any_full = any_full || o->levels[li] == 0;
    if (any_full) {
        fprintf(f, "\n## Full eviction: mzcache vs each baseline, each evicting all it can\n\n");
        fprintf(f, "Level 0 asks every mode for everything. Each column pair is one mode's full "
                   "eviction: the remaining %% it reached (median of its runs; for os-paging "
                   "with zram that is zram's compressed copy of the KV) and the TTFT after it. "
                   "Speedup = baseline TTFT / mzcache TTFT, at each one's own full eviction.\n\n");
        fprintf(f, "| model | ctx | mzcache rem. %% | mzcache TTFT s | baseline | baseline rem. %% | "
                   "placement | baseline TTFT s | speedup (full vs full) | load |\n"
                   "|---|---|---|---|---|---|---|---|---|---|\n");
        for (int mi = 0; mi < o->n_models; mi++)
            for (int ci2 = 0; ci2 < o->n_ctxs; ci2++) {
                const ttft_row *mz = find_row(o->models[mi], o->ctxs[ci2], "mzcache", c0, o0, v0, 0);
                for (size_t b = 0; b < 3; b++) {
                    const ttft_row *br =
                        find_row(o->models[mi], o->ctxs[ci2], k_baselines[b], NULL, NULL, NULL, 0);
                    if (!br) continue;
                    char zr[64] = "";
                    if (br->zram_algo[0])
                        snprintf(zr, sizeof zr, " (%s %.0f of %.0f MiB)", br->zram_algo,
                                 br->zram_compr_mib, br->zram_orig_mib);
                    double load = br->load_max;
                    if (mz && mz->load_max > load) load = mz->load_max;
                    if (mz)
                        fprintf(f, "| %s | %d | %.1f | %.3f | %s | %.1f | %s%s | %.3f%s | **%.2fx** | %.1f |\n",
                                o->models[mi], o->ctxs[ci2], mz->remaining_med, mz->ttft_med,
                                k_baselines[b], br->remaining_med,
                                br->placement[0] ? br->placement : "-", zr, br->ttft_med,
                                br->level == -1 ? "*" : "", br->ttft_med / mz->ttft_med, load);
                    else
                        fprintf(f, "| %s | %d | - | - | %s | %.1f | %s%s | %.3f%s | - | %.1f |\n",
                                o->models[mi], o->ctxs[ci2], k_baselines[b], br->remaining_med,
                                br->placement[0] ? br->placement : "-", zr, br->ttft_med,
                                br->level == -1 ? "*" : "", load);
                }
            }
    }

    if (n_peer) {
        fprintf(f, "\n## Peer: llama.cpp (bench/peer_llamacpp.py) vs mzcache\n\n");
        fprintf(f, "| model | ctx | llama.cpp metric | llama.cpp s | mzcache s (same point) | "
                   "speedup of mzcache | note |\n|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n_peer; i++) {
            const peer_row *p = &peer[i];
            int lv = !strcmp(p->metric, "inmem") ? 100 : 0;
            const ttft_row *mz = lv == 100 ? find_row(p->model, p->n_ctx, "mzcache", NULL, NULL, NULL, 100)
                                            : find_row(p->model, p->n_ctx, "mzcache", c0, o0, v0, 0);
            fprintf(f, "| %s | %d | %s | %.3f | ", p->model, p->n_ctx, p->metric, p->med);
            if (mz)
                fprintf(f, "%.3f (%s) | %.2fx | %s |\n", mz->ttft_med, lv == 100 ? "in memory" : "0 %",
                        p->med / mz->ttft_med, p->note);
            else
                fprintf(f, "- | - | %s |\n", p->note);
        }
    }

    /* Every row, with the restore breakdown (Fig. 10) and the variants. */
    fprintf(f, "\n## All points (restore breakdown: busy ms of each activity)\n\n");
    fprintf(f, "| model | ctx | mode | codec | order | overlap | level | remaining %% | at restore %% | "
               "placement | TTFT s | runs s | "
               "bound s | restore MiB | evict ms | alloc ms | storage ms | memory ms | all ready ms | "
               "stall ms | prefill ms | cached KiB | load | note |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < ttft_rows.n; i++) {
        const ttft_row *r = &ttft_rows.v[i];
        char runs[MZ_TTFT_MAX_RUNS * 10];
        fmt_runs(r, runs, sizeof runs);
        char lvl[24];
        if (r->level == -1) snprintf(lvl, sizeof lvl, "any");
        else if (r->level == 0) snprintf(lvl, sizeof lvl, "0 (full)");
        else snprintf(lvl, sizeof lvl, "%d", r->level);
        char plc[80];
        if (r->zram_algo[0])
            snprintf(plc, sizeof plc, "%s (%s %.0f of %.0f MiB)", r->placement, r->zram_algo,
                     r->zram_compr_mib, r->zram_orig_mib);
        else
            snprintf(plc, sizeof plc, "%s", r->placement[0] ? r->placement : "-");
        fprintf(f, "| %s | %d | %s | %s | %s | %s | %s | %.1f%s | %.1f | %s | %.3f | %s | %.3f | %.0f | %.0f | %.0f | "
                   "%.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f-%.1f | %s |\n",
                r->model, r->n_ctx, r->mode, r->codec, r->order, r->overlap, lvl, r->remaining_med,
                r->in_tol ? "" : " (!)", r->remaining_restore_med, plc, r->ttft_med, runs, r->bound_s,
                r->restore_mib, r->evict_ms,
                r->alloc_ms, r->storage_ms, r->mem_ms, r->restore_ms, r->stall_ms, r->prefill_ms,
                r->cached_kib_max, isfinite(r->load_min) ? r->load_min : 0.0,
                isfinite(r->load_max) ? r->load_max : 0.0, r->note);
    }
    if (plots[0]) fprintf(f, "\n## Plots\n\n%s", plots);
    fclose(f);
    return 0;
}

/* One PNG per (model, ctx): TTFT vs remaining level, one line per mode/config. */
void ttft_write_plots(const mz_ttft_opts *o, const char *stem, char *md, size_t cap)
{
    md[0] = 0;
    size_t mdn = 0;
    for (int mi = 0; mi < o->n_models; mi++)
        for (int ci = 0; ci < o->n_ctxs; ci++) {
            /* Series: distinct (mode, codec, order, overlap) of this model/ctx. */
            char series[32][80];
            int ns = 0;
            for (size_t i = 0; i < ttft_rows.n; i++) {
                const ttft_row *r = &ttft_rows.v[i];
                if (strcmp(r->model, o->models[mi]) || r->n_ctx != o->ctxs[ci] || r->skipped ||
                    r->level == 100)
                    continue;
                char s[80];
                if (!strcmp(r->mode, "mzcache"))
                    snprintf(s, sizeof s, "mzcache %s/%s/%s", r->codec, r->order, r->overlap);
                else
                    snprintf(s, sizeof s, "%s", r->mode);
                int k = 0;
                while (k < ns && strcmp(series[k], s)) k++;
                if (k == ns && ns < 32) snprintf(series[ns++], sizeof series[0], "%s", s);
            }
            if (!ns) continue;
            char dat[PATH_MAX], gp[PATH_MAX], png[PATH_MAX];
            snprintf(dat, sizeof dat, "%s/%s-%s-%d.dat", o->out_dir, stem, o->models[mi], o->ctxs[ci]);
            snprintf(gp, sizeof gp, "%s/%s-%s-%d.gp", o->out_dir, stem, o->models[mi], o->ctxs[ci]);
            snprintf(png, sizeof png, "%s/%s-%s-%d.png", o->out_dir, stem, o->models[mi], o->ctxs[ci]);
            FILE *f = fopen(dat, "w");
            if (!f) continue;
            /* Per series a pair of columns (x, TTFT): x is the remaining %
             * the mode actually reached (os-paging's full eviction with zram
             * stays well above 0), the level for recompute (any level). */
            fprintf(f, "level");
            for (int k = 0; k < ns; k++) fprintf(f, "\t\"x\"\t\"%s\"", series[k]);
            fprintf(f, "\n");
            for (int li = 0; li < o->n_levels; li++) {
                fprintf(f, "%d", o->levels[li]);
                for (int k = 0; k < ns; k++) {
                    double v = NAN, x = NAN;
                    for (size_t i = 0; i < ttft_rows.n; i++) {
                        const ttft_row *r = &ttft_rows.v[i];
                        if (strcmp(r->model, o->models[mi]) || r->n_ctx != o->ctxs[ci] || r->skipped)
                            continue;
                        if (r->level != o->levels[li] && r->level != -1) continue;
                        char s[80];
                        if (!strcmp(r->mode, "mzcache"))
                            snprintf(s, sizeof s, "mzcache %s/%s/%s", r->codec, r->order, r->overlap);
                        else
                            snprintf(s, sizeof s, "%s", r->mode);
                        if (!strcmp(s, series[k])) {
                            v = r->ttft_med;
                            x = r->level == -1 ? (double)o->levels[li] : r->remaining_med;
                        }
                    }
                    if (isnan(v)) fprintf(f, "\tNaN\tNaN");
                    else fprintf(f, "\t%.2f\t%.4f", x, v);
                }
                fprintf(f, "\n");
            }
            fclose(f);
            f = fopen(gp, "w");
            if (!f) continue;
            fprintf(f, "set terminal pngcairo size 800,500\nset output '%s'\n", png);
            fprintf(f, "set title '%s, %d-token synthetic context, %d-token query' noenhanced\n",
                    o->models[mi],
                    o->ctxs[ci], o->query);
            fprintf(f, "set xlabel 'remaining memory reached (%%)'\nset ylabel 'TTFT (s)'\n"
                       "set key outside right\nset grid\nset xrange [-5:80]\nset yrange [0:*]\n");
            fprintf(f, "plot for [i=1:%d] '%s' using (column(2*i)):(column(2*i+1)) with linespoints "
                       "lw 2 title columnheader(2*i+1) noenhanced\n", ns, dat);
            fclose(f);
            char cmd[PATH_MAX * 2];
            snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", gp);
            int rc = system(cmd);
            if (rc == 0) {
                mdn += (size_t)snprintf(md + mdn, mdn < cap ? cap - mdn : 0, "![%s %d](%s)\n\n",
                                        o->models[mi], o->ctxs[ci], strrchr(png, '/') + 1);
                fprintf(stderr, "  plot %s\n", png);
            } else {
                fprintf(stderr, "mzcache bench: gnuplot failed (%d); data in %s\n", rc, dat);
            }
            if (mdn >= cap) mdn = cap - 1;
        }
}
