-- wrk script: every request from another client address, so that the per-address limiters of
-- the service do not turn the run into a measurement of 429s (every proxy is trusted).
counter = 0
request = function()
  counter = counter + 1
  local ip = string.format("10.%d.%d.%d", math.floor(counter / 65536) % 256, math.floor(counter / 256) % 256, counter % 256)
  return wrk.format(nil, nil, { ["X-Forwarded-For"] = ip })
end
