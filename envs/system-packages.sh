#!/usr/bin/env bash
# The system packages the project needs beside its Python environment, installed where they are missing:
#   bubblewrap (bwrap): the OS sandbox the code task runs model-written programs in (randopt/tasks/sandbox.py).
# Debian/Ubuntu's apt, as root (CI runs as root); elsewhere it says what to install and goes on, since
# only the code task needs it, and that task refuses to run untrusted code without it (docs/tasks.md).
set -euo pipefail
command -v bwrap > /dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap > /dev/null
else
    echo "note: bubblewrap (bwrap) is not installed; the code task needs it (Debian/Ubuntu: sudo apt-get install bubblewrap)" >&2
fi
