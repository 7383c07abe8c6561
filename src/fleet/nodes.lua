-- floodgate fleet: this node is alive; how many nodes are?
-- KEYS[1]: the sorted set of nodes, each scored with the time of its last sync (ms).
-- ARGV[1]: this node's id; ARGV[2]: now on this node's clock (ms); ARGV[3]: the oldest score
--          still alive (now minus the nodes' time to live); ARGV[4]: the set's time to live (ms).
-- Returns the number of nodes alive, this one included.
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('ZCARD', KEYS[1])
