#!/bin/sh
# A wrapper as Debian ships many: set something up, then exec the real program ($PROBE).
MARK=wrapped
export MARK
exec "$PROBE" "$@"
