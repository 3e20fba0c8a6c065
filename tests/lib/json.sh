# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# JSON queries for shell tests (sourced by harness.sh).
#
#   json FILE|- EXPR   evaluates the python expression EXPR over the parsed
#                      JSON `d` and prints the result (lists, dicts and
#                      booleans as JSON, everything else as python prints it)
json() {
    python3 -c 'import json, sys
src, expr = sys.argv[1], sys.argv[2]
d = json.load(sys.stdin if src == "-" else open(src))
r = eval(expr)
print(json.dumps(r) if isinstance(r, (dict, list, bool)) else r)' "$1" "$2"
}
