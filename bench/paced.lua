-- wrk script at a fixed offered rate (bench/freshness_cost.py): as requests.lua (a random line of
-- the request file, from a random client address of 10.0.0.0/8, one "BENCH {json}" line at the
-- end), but each thread sends its requests on a schedule of RATE per second over all its
-- connections, whatever the answers' latency, as long as a connection is free. A schedule more
-- than a second behind is not caught up in a burst: the missed slots are dropped (the achieved
-- rate then says so).
--
--   wrk -t1 -c16 -d60s -s bench/paced.lua http://127.0.0.1:8000 -- requests.txt SEED RATE

local ffi = require("ffi")
ffi.cdef([[
typedef struct { long tv_sec; long tv_nsec; } paced_timespec;
int clock_gettime(int clock, paced_timespec *now);
]])
local CLOCK_MONOTONIC = 1
local now_spec = ffi.new("paced_timespec")

local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, now_spec)
  return tonumber(now_spec.tv_sec) * 1000 + tonumber(now_spec.tv_nsec) / 1e6
end

local entries = {}
local count = 0
local threads = 0
local interval_ms = 0
local next_slot = nil

function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

function init(args)
  local file = assert(io.open(args[1], "r"))
  for line in file:lines() do
    local method, path = line:match("^(%u+) (%S+)$")
    if method then
      count = count + 1
      entries[count] = { method, path }
    end
  end
  file:close()
  assert(count > 0, "no request line in " .. args[1])
  math.randomseed((tonumber(args[2]) or os.time()) * 1000 + (thread_number or 0))
  local rate = assert(tonumber(args[3]), "the third argument is the rate per thread")
  interval_ms = 1000 / rate
end

function delay()
  local now = now_ms()
  if next_slot == nil or next_slot < now - 1000 then
    next_slot = now
  end
  local slot = next_slot
  next_slot = next_slot + interval_ms
  local wait = slot - now
  if wait < 0 then
    return 0
  end
  return math.floor(wait)
end

function request()
  local entry = entries[math.random(count)]
  local address = string.format("10.%d.%d.%d", math.random(0, 255), math.random(0, 255), math.random(1, 254))
  return wrk.format(entry[1], entry[2], { ["X-Forwarded-For"] = address })
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, "status": %d, '
      .. '"timeout": %d, "mean_us": %.1f, "p50_us": %d, "p90_us": %d, "p95_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, errors.connect, errors.read, errors.write, errors.status,
    errors.timeout, latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency.max
  ))
end
