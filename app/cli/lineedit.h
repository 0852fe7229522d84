/* lineedit.h — input lines for `mzcache chat` (libedit on a terminal, else fgets). */
#ifndef MZ_CLI_LINEEDIT_H
#define MZ_CLI_LINEEDIT_H

#include <stdbool.h>

typedef struct cli_lines cli_lines;

/* PROMPT is shown before each line on a terminal; it must outlive the reader. */
cli_lines *cli_lines_open(const char *prompt);
/* The next line without its newline (caller frees), or NULL at end of input
 * (Ctrl-D) or when Ctrl-C was pressed while waiting (cli_interrupted set). */
char *cli_lines_read(cli_lines *r);
/* Adds a line to the history (up arrow brings it back). */
void cli_lines_remember(cli_lines *r, const char *line);
/* true: libedit line editing and history are in use. */
bool cli_lines_editing(const cli_lines *r);
void cli_lines_close(cli_lines *r);

#endif
