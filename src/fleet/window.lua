-- floodgate fleet: one node's counts of one key in a window and the window before, and what
-- the whole fleet counted in both.
-- KEYS[1]: the key's hash of counts for this window; KEYS[2]: for the window before;
-- KEYS[3]: the key's hash of refusals for this window; KEYS[4]: for the window before. All
--          four carry the same hash tag, so they share a Cluster slot. In each hash, a field
--          is a node's id and its value that node's count (of admitted requests, or of
--          refusals) of the key in that window.
-- ARGV[1]: this node's id;
-- ARGV[2]: this node's count of the key in this window so far, in decimal (absolute, not what
--          it counted since its last push; "0": nothing to store);
-- ARGV[3]: the hashes' time to live in milliseconds, renewed whenever a count is raised;
-- ARGV[4]: this node's count of the key in the window before (that window is over: its final
--          count, so that a push that missed its end, or a Redis that lost it, has it);
-- ARGV[5]: this node's refusals of the key in this window so far;
-- ARGV[6]: its refusals of the key in the window before.
-- Returns {this window's total, the previous window's total, the other nodes that refused the
-- key in this window or the window before (each node once)}: a total is the sum of a hash's
-- counts; a missing hash counts 0.
local function raise(key, value)
  local count = tonumber(value) or 0
  if count > 0 then
    local stored = tonumber(redis.call('HGET', key, ARGV[1]) or '0') or 0
    -- Within a window a node's count only grows: a push sent again, or overtaken by a later
    -- one, leaves a larger count alone. Nothing to store writes nothing, so creates no hash.
    if count > stored then
      redis.call('HSET', key, ARGV[1], value)
      redis.call('PEXPIRE', key, ARGV[3])
    end
  end
end
raise(KEYS[1], ARGV[2])
raise(KEYS[2], ARGV[4])
raise(KEYS[3], ARGV[5])
raise(KEYS[4], ARGV[6])
local function sum(key)
  local counts = redis.call('HVALS', key)
  local total = 0
  for i = 1, #counts do
    total = total + (tonumber(counts[i]) or 0)
  end
  return total
end
local function refusers()
  local seen, n = {}, 0
  for _, key in ipairs({KEYS[3], KEYS[4]}) do
    local nodes = redis.call('HKEYS', key)
    for i = 1, #nodes do
      local node = nodes[i]
      if node ~= ARGV[1] and not seen[node] then
        seen[node] = true
        n = n + 1
      end
    end
  end
  return n
end
return {sum(KEYS[1]), sum(KEYS[2]), refusers()}
