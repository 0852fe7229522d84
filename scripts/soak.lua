-- soak.lua: the request mix for scripts/soak.sh (wrk 4, LuaJIT).
--
-- Every request picks one of, by weight:
--   chat 40 (a fifth of them streamed, SSE), completion 10, status 20,
--   metrics 5, evict 12 (25% / 50% / all / 1 MiB), restore 6,
--   health 3, bad request 4 (malformed JSON, wrong types: must get a 4xx).
-- Conversations come from a few system prompts and questions, so requests
-- reuse, extend and cut the one cached conversation.
-- done() prints one "soak:" line per fact for soak.sh to parse.

local threads = {}

function setup(thread)
    thread:set("tid", #threads + 1)
    table.insert(threads, thread)
end

local systems = {
    "You are a concise assistant.",
    "You answer in one short sentence.",
    "You are a helpful gardener.",
}
local questions = {
    "What is the capital of France?",
    "Name three colours.",
    "How do plants drink water?",
    "Give me a tip for sleeping well.",
    "What is two plus two?",
    "Why is the sky blue?",
}
local prompts = { "Once upon a time", "The best way to learn", "def fib(n):" }
local evicts = { '{"percent": 25}', '{"percent": 50}', '{"all": true}', '{"bytes": 1048576}' }
local bad = {
    '{"messages": [{"role": "user", "content": "unterminated',
    '{"messages": "not an array"}',
    '{"messages": [{"role": "robot", "content": "x"}]}',
    '{"prompt": 42}',
    '{"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}',
    '{"percent": 400}',
}
local json_headers = { ["Content-Type"] = "application/json" }

local function pick(t) return t[math.random(#t)] end

local function chat_body()
    local stream = math.random(5) == 1 and "true" or "false"
    local turns = '{"role": "system", "content": "' .. pick(systems) .. '"}, {"role": "user", "content": "'
        .. pick(questions) .. '"}'
    if math.random(3) == 1 then -- a longer conversation: extends the cached one
        turns = turns .. ', {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "'
            .. pick(questions) .. '"}'
    end
    return '{"messages": [' .. turns .. '], "max_tokens": 8, "temperature": 0, "stream": ' .. stream .. '}'
end

function init(args)
    math.randomseed(os.time() * 1000 + tid * 7919)
    kinds = {}
    statuses = {}
end

local function count(k) kinds[k] = (kinds[k] or 0) + 1 end

function request()
    local r = math.random(100)
    if r <= 40 then
        count("chat")
        return wrk.format("POST", "/v1/chat/completions", json_headers, chat_body())
    elseif r <= 50 then
        count("completion")
        return wrk.format("POST", "/v1/completions", json_headers,
            '{"prompt": "' .. pick(prompts) .. '", "max_tokens": 8, "temperature": 0}')
    elseif r <= 70 then
        count("status")
        return wrk.format("GET", "/mz/status")
    elseif r <= 75 then
        count("metrics")
        return wrk.format("GET", "/metrics")
    elseif r <= 87 then
        count("evict")
        return wrk.format("POST", "/mz/evict", json_headers, pick(evicts))
    elseif r <= 93 then
        count("restore")
        return wrk.format("POST", "/mz/restore", json_headers, "")
    elseif r <= 96 then
        count("health")
        return wrk.format("GET", "/health")
    else
        count("bad")
        local b = pick(bad)
        local path = b:find("percent") and "/mz/evict" or (b:find("prompt") and "/v1/completions" or "/v1/chat/completions")
        return wrk.format("POST", path, json_headers, b)
    end
end

function response(status, headers, body)
    statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
    local k, s = {}, {}
    for _, t in ipairs(threads) do
        for name, n in pairs(t:get("kinds")) do k[name] = (k[name] or 0) + n end
        for code, n in pairs(t:get("statuses")) do s[code] = (s[code] or 0) + n end
    end
    local e = summary.errors
    io.write(string.format("soak: requests %d in %.1f s\n", summary.requests, summary.duration / 1e6))
    io.write(string.format("soak: socket_errors connect=%d read=%d write=%d timeout=%d\n",
        e.connect, e.read, e.write, e.timeout))
    local line = "soak: sent"
    for name, n in pairs(k) do line = line .. " " .. name .. "=" .. n end
    io.write(line .. "\n")
    line = "soak: status"
    local codes = {}
    for code in pairs(s) do table.insert(codes, code) end
    table.sort(codes)
    for _, code in ipairs(codes) do line = line .. " " .. code .. "=" .. s[code] end
    io.write(line .. "\n")
    io.write(string.format("soak: latency_ms p50=%.1f p99=%.1f max=%.1f\n",
        latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3))
end
