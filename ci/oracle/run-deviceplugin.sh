#!/bin/sh
# Run the device-plugin oracle in a private mount namespace, where it mounts the two
# faked host files (fakehost.go) without touching the machine's /proc or /sys.
exec unshare --mount --propagation private "$(dirname "$0")/deviceplugin" --fake-host "$@"
