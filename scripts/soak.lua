-- wrk script for scripts/soak: the soak server's origins, chosen per request by Host header.
--
--   wrk -t2 -c32 -d60s --latency -s scripts/soak.lua http://127.0.0.1:PORT/ -- [flood_share]
--
-- A share of the requests (flood_share, default 0.2) goes to flooded.example; the rest are
-- spread uniformly over the 10,000 healthy origins site-00000.example … site-09999.example,
-- so that each healthy origin stays far under the demo's limits. No request goes to
-- slow.example: its 100 ms answers would hold wrk's connections and make the latency
-- comparison about that origin. At the end, one `soak-wrk key=value …` line for scripts/soak
-- (latencies in microseconds).

local healthy_origins = 10000
local flood_share = 0.2
local healthy, flooded = {}, nil

local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
end

function init(args)
   flood_share = tonumber(args[1]) or flood_share
   -- Each thread its own sequence.
   math.randomseed(os.time() + 7919 * (id or 0))
   for i = 1, healthy_origins do
      healthy[i] = wrk.format("GET", "/", { Host = string.format("site-%05d.example", i - 1) })
   end
   flooded = wrk.format("GET", "/", { Host = "flooded.example" })
end

function request()
   if math.random() < flood_share then
      return flooded
   end
   return healthy[math.random(healthy_origins)]
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "soak-wrk requests=%d duration_us=%d connect=%d read=%d write=%d timeout=%d status=%d " ..
      "p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d mean_us=%.0f\n",
      summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean))
end
