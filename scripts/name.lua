-- name.lua - a session's HELLO name, kept in Redis while the session
-- holds keys, so that LOCKS on any broker shows who holds what by name.
-- KEYS[1]  <prefix>:name:<client-id>
-- ARGV[1]  the name (1..64 bytes of 0x21..0x7e), or "" to delete it
-- ARGV[2]  its PX: the broker writes it again well before it runs out
-- Returns 1.
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
