#!/bin/sh
# package-unit.sh SRC DEST - the package's systemd unit, made from the
# project's (systemd/lockbrokerd.service, as "make install" stages it).
# Two things differ: the package's paths instead of /usr/local, and the
# lockbroker system user the postinst makes instead of DynamicUser=yes, so
# that a file the daemon reads (its conf, an acl_file, a TLS key) can be
# root:lockbroker 0640.  The hardening is the same line for line.  Fails
# when the source no longer has what this replaces: then update this.
set -eu
src=$1
dest=$2
mkdir -p "$(dirname "$dest")"
sed -e 's|/usr/local/sbin/|/usr/sbin/|g' \
    -e 's|/usr/local/etc/|/etc/|g' \
    -e '/^# The paths below are those of "make install/,/^#     systemctl edit lockbrokerd/c\
# This is the Debian package'"'"'s unit, made by debian/package-unit.sh from\
# the project'"'"'s: the package'"'"'s paths, and the lockbroker system user\
# instead of DynamicUser.  Change it with a drop-in:\
#     systemctl edit lockbrokerd' \
    -e '/^# Runs as a transient unprivileged user allocated at start/c\
# Runs as the system user the package made (never root), whose group may\
# read root:lockbroker 0640 files: the conf, an acl_file, a TLS key.\
User=lockbroker\
# Its primary group, which the files it creates get (the unix socket).' \
    -e '/^DynamicUser=yes$/c\
Group=lockbroker' \
    "$src" >"$dest.tmp"
fail() { echo "package-unit.sh: $*; update debian/package-unit.sh" >&2; rm -f "$dest.tmp"; exit 1; }
grep -qx 'ExecStart=/usr/sbin/lockbrokerd -c /etc/lockbroker/lockbrokerd.conf' "$dest.tmp" ||
    fail "no ExecStart of the package's paths"
grep -qx 'User=lockbroker' "$dest.tmp" || fail "no User=lockbroker"
grep -qx 'Group=lockbroker' "$dest.tmp" || fail "no Group=lockbroker"
! grep -q '^DynamicUser=' "$dest.tmp" || fail "DynamicUser= is left"
! grep -q '/usr/local' "$dest.tmp" || fail "a /usr/local path is left"
mv "$dest.tmp" "$dest"
