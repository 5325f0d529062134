-- wrk script of the load runs (bench/run.py): each request is a line of the request file given as
-- the first argument ("METHOD PATH"), drawn at random, from a random client address of 10.0.0.0/8,
-- so that the per-address limiters of the service count every request without refusing any.
-- At the end, one line "BENCH {json}" carries the counts and latency percentiles.
--
--   wrk -t1 -c32 -d5s -s bench/requests.lua http://127.0.0.1:8000 -- requests.txt SEED

local entries = {}
local count = 0
local threads = 0

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
