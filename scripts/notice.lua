-- notice.lua - a broker's word on the wanted channel about the waiters of
-- one key (WANTED notices, EVENTS ON WANTED): its own queue's size and
-- oldest wait ("<broker-id>=<waiters> <oldest-ms> <name>"), or a holder's
-- request that brokers with waiters for the key say so ("<broker-id>?0
-- <name>").  Lock names have no blank, so brokers older than notices take
-- neither for a waiter's announcement of a key they know.
-- KEYS[1]  the lock key: it routes the call to the key's slot (cluster
--          mode), nothing reads or writes it
-- ARGV[1]  the wanted channel (in cluster mode the slot's)
-- ARGV[2]  the message
-- Returns 1.
local pub = string.sub(ARGV[1], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
redis.call(pub, ARGV[1], ARGV[2])
return 1
