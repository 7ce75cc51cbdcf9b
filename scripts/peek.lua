-- peek.lua - strings read beside a page of LOCKS (the admin view): the
-- values of exclusive holds (<prefix>:value:<name>, value.lua) and the
-- HELLO names of holding sessions (<prefix>:name:<client-id>, name.lua).
-- Read only.
-- KEYS     the keys to read (in cluster mode of one slot)
-- Returns one element per key: its string, or false (absent, or not a
-- string).
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.pcall('GET', k)
  out[i] = type(v) == 'string' and v or false
end
return out
