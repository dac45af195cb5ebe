"""Lua for RedisRateLimiter: the steps of window.WindowStore, run atomically inside Redis.

Time comes from the caller (ARGV[1], tests) or from Redis TIME, so every gateway replica shares
one clock. Counters are hashes {bucket_start_ms: amount} with a TTL just past the window.
"""

_PRELUDE = """
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local window = tonumber(ARGV[2])
local bsize = tonumber(ARGV[3])
local bucket = now - (now % bsize)
local ttl = window + 2 * bsize
local function field(b) return string.format('%d', b) end
"""

# KEYS: counter hashes. ARGV: now_ms|'', window_ms, bucket_ms, then (limit, cost) per key.
# Returns {status, tripped_index(0-based|-1), retry_ms, bucket_ms, used..., reset_ms...}.
ACQUIRE = _PRELUDE + """
local n = #KEYS
local used, reset, live = {}, {}, {}
for i = 1, n do
  local flat = redis.call('HGETALL', KEYS[i])
  local buckets, total, oldest = {}, 0, nil
  for j = 1, #flat, 2 do
    local b = tonumber(flat[j])
    local v = tonumber(flat[j + 1])
    if b + bsize + window <= now then
      redis.call('HDEL', KEYS[i], flat[j])
    else
      buckets[#buckets + 1] = {b, v}
      total = total + v
      if oldest == nil or b < oldest then oldest = b end
    end
  end
  table.sort(buckets, function(x, y) return x[1] < y[1] end)
  live[i] = buckets
  used[i] = total
  if oldest then reset[i] = oldest + bsize + window - now else reset[i] = 0 end
end

local function reply(status, idx, retry)
  local out = {status, idx, retry, bucket}
  for i = 1, n do out[#out + 1] = used[i] end
  for i = 1, n do out[#out + 1] = reset[i] end
  return out
end

for i = 1, n do
  if tonumber(ARGV[5 + 2 * (i - 1)]) > tonumber(ARGV[4 + 2 * (i - 1)]) then
    return reply(2, i - 1, window)
  end
end

local worst, worst_retry = -1, -1
for i = 1, n do
  local limit = tonumber(ARGV[4 + 2 * (i - 1)])
  local cost = tonumber(ARGV[5 + 2 * (i - 1)])
  if used[i] + cost > limit then
    local need = used[i] + cost - limit
    local freed, retry = 0, window
    for _, bv in ipairs(live[i]) do
      freed = freed + bv[2]
      if freed >= need then
        retry = bv[1] + bsize + window - now
        break
      end
    end
    if retry > worst_retry then worst, worst_retry = i - 1, retry end
  end
end
if worst >= 0 then return reply(1, worst, worst_retry) end

for i = 1, n do
  local cost = tonumber(ARGV[5 + 2 * (i - 1)])
  redis.call('HINCRBY', KEYS[i], field(bucket), cost)
  redis.call('PEXPIRE', KEYS[i], ttl)
  used[i] = used[i] + cost
  if reset[i] == 0 then reset[i] = bucket + bsize + window - now end
end
return reply(0, -1, 0)
"""

# KEYS: token counters of one reservation. ARGV: now_ms|'', window_ms, bucket_ms,
# reservation bucket, delta. Refunds come out of the reservation's bucket; extra usage is
# charged to the current bucket because it happened now.
ADJUST = _PRELUDE + """
local orig = tonumber(ARGV[4])
local delta = tonumber(ARGV[5])
for _, key in ipairs(KEYS) do
  if delta < 0 then
    if orig + bsize + window > now then
      local v = tonumber(redis.call('HGET', key, field(orig)) or '0')
      local left = v + delta
      if left > 0 then
        redis.call('HSET', key, field(orig), left)
      else
        redis.call('HDEL', key, field(orig))
      end
    end
  elseif delta > 0 then
    redis.call('HINCRBY', key, field(bucket), delta)
    redis.call('PEXPIRE', key, ttl)
  end
end
return 1
"""
