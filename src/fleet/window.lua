-- floodgate fleet: one node's push to one key's counter for one window, and the fleet's totals.
-- KEYS[1]: the counter of this window; KEYS[2]: the counter of the window before it. Both carry
--          the same hash tag, so they share a Cluster slot.
-- ARGV[1]: what this node counted since its last push, in decimal ("0": only read);
-- ARGV[2]: the counter's time to live in milliseconds, renewed on every push that adds.
-- Returns {this window's total, the previous window's total}.
local current
if ARGV[1] ~= '0' then
  current = redis.call('INCRBY', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  -- A pure read leaves no key behind.
  current = tonumber(redis.call('GET', KEYS[1]) or '0')
end
local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
return {current, previous}
