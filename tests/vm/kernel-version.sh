#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Prints the version of the kernel that Debian's linux-image-amd64 installs
# (e.g. 6.1.0-57-amd64), taken from the package's dependency so that it is
# never hard-coded. Prints nothing when the package is not installed.
dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null) || exit 0
ver=$(printf '%s\n' "$dep" | tr ',' '\n' | sed -n 's/^ *linux-image-\([^ ]*\).*/\1/p' | head -n1)
[ -n "$ver" ] && [ -d "/lib/modules/$ver" ] && printf '%s\n' "$ver"
exit 0
