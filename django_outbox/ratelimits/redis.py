"""Token buckets in Redis: one Lua script per request for tokens, timed by Redis's clock.

Keys carry the cache's key prefix and the database name (as wake-up keys do) and expire
once their bucket is full again, so idle limits leave nothing behind.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db import router

from django_outbox.lib.rate import Rate
from django_outbox.models import RateBucket

#: ARGV: interval, capacity (seconds), wanted (0: reserve one, whatever the bucket holds).
#: Returns {given, new full time, now}, times as strings (Lua numbers would be truncated).
_TAKE = """
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local base = math.max(tat, now)
local given = 1
if wanted > 0 then
  given = math.floor((now + capacity - base) / interval + 0.01)
  given = math.max(0, math.min(wanted, given))
end
local full = base + given * interval
if given > 0 then
  redis.call('SET', KEYS[1], string.format('%.6f', full), 'PX',
             math.ceil((full - now) * 1000) + 1000)
end
return {given, string.format('%.6f', full), string.format('%.6f', now)}
"""

#: ARGV: seconds to move the full time back.
_GIVE_BACK = """
local tat = redis.call('GET', KEYS[1])
if tat then
  local ttl = redis.call('PTTL', KEYS[1])
  redis.call('SET', KEYS[1], string.format('%.6f', tonumber(tat) - tonumber(ARGV[1])), 'PX',
             math.max(ttl, 1000))
end
return 0
"""


class RedisStore:
    def __init__(self, alias: str) -> None:
        from django_redis import get_redis_connection

        self.alias = alias
        self.client = get_redis_connection(alias)

    def take(self, key: str, rate: Rate, wanted: int) -> tuple[int, float, float]:
        given, full_at, now = self._script(_TAKE)(
            keys=[self._key(key)], args=[repr(rate.interval), repr(rate.capacity), wanted]
        )
        return int(given), float(full_at), float(now)

    def reserve(self, key: str, rate: Rate) -> tuple[float, float]:
        _given, full_at, now = self._script(_TAKE)(
            keys=[self._key(key)], args=[repr(rate.interval), repr(rate.capacity), 0]
        )
        return float(full_at), float(now)

    def give_back(self, key: str, rate: Rate, count: int) -> None:
        self._script(_GIVE_BACK)(keys=[self._key(key)], args=[repr(count * rate.interval)])

    def full_at(self, key: str) -> float:
        value = self.client.get(self._key(key))
        return float(value) if value else 0.0

    def _script(self, source: str) -> Any:
        """The script, registered once per client (it then runs by its SHA)."""
        slot = (id(self.client), source)
        if slot not in _scripts:
            _scripts[slot] = self.client.register_script(source)
        return _scripts[slot]

    def _key(self, key: str) -> str:
        prefix = caches[self.alias].key_prefix or ""
        database = settings.DATABASES[router.db_for_write(RateBucket)]["NAME"]
        return f"{prefix}:django_outbox:{database}:rate:{key}"


_scripts: dict[tuple[int, str], Any] = {}
