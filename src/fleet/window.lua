-- floodgate fleet: one node's count of one key in one window, and what the whole fleet counted.
-- KEYS[1]: the key's hash for this window; KEYS[2]: its hash for the window before. Both carry
--          the same hash tag, so they share a Cluster slot. In each hash, a field is a node's
--          id and its value that node's count of the key in that window.
-- ARGV[1]: this node's id;
-- ARGV[2]: this node's count of the key in this window so far, in decimal (absolute, not what
--          it counted since its last push; "0": only read);
-- ARGV[3]: the hash's time to live in milliseconds, renewed whenever the count is raised.
-- Returns {this window's total, its senders, the previous window's total, its senders}: a
-- hash's total is the sum of its counts and its senders the number of its fields (the nodes
-- that pushed the key in that window); a missing hash has 0 and 0.
local count = tonumber(ARGV[2])
if count > 0 then
  local stored = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
  -- Within a window a node's count only grows: a push sent again, or overtaken by a later
  -- one, leaves a larger count alone. A pure read writes nothing, so creates no hash.
  if count > stored then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
end
local function sum_and_senders(key)
  local counts = redis.call('HVALS', key)
  local sum = 0
  for i = 1, #counts do
    sum = sum + (tonumber(counts[i]) or 0)
  end
  return sum, #counts
end
local current, current_senders = sum_and_senders(KEYS[1])
local previous, previous_senders = sum_and_senders(KEYS[2])
return {current, current_senders, previous, previous_senders}
