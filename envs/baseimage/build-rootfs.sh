#!/bin/bash
# build-rootfs.sh ROOTFS_DIR TARBALL
# Builds a minimal Debian bookworm root file system with python3 and pytest,
# a user "agent" (uid/gid 1000) and /workspace, and packs it into TARBALL.
# Needs root and debootstrap.
set -euo pipefail
rootfs=$1
tarball=$2
mirror=${GYMSERVER_DEBIAN_MIRROR:-http://deb.debian.org/debian}

echo "debootstrap bookworm into $rootfs (mirror $mirror)"
debootstrap --variant=minbase --include=python3,python3-pytest bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
	tail -n 30 "$rootfs.log" >&2
	exit 1
}
echo "configuring the root file system"
chroot "$rootfs" /usr/sbin/groupadd --gid 1000 agent
chroot "$rootfs" /usr/sbin/useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent --shell /bin/bash agent
mkdir -p "$rootfs/workspace"
chown 1000:1000 "$rootfs/workspace"
# Shrink: package caches, lists, docs and locales are not needed at run time.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
	"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
	"$rootfs"/usr/share/locale/* "$rootfs"/var/log/* "$rootfs"/tmp/*
# Bytecode for everything Python imports from the system, compiled now by
# root: pytest then starts without compiling itself (PYTHONDONTWRITEBYTECODE
# keeps it from ever writing a cache), and the agent can read the caches
# but not write them.
stdlib=$(chroot "$rootfs" /usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')
chroot "$rootfs" /usr/bin/python3 -m compileall -q "$stdlib" /usr/lib/python3/dist-packages >/dev/null
# C.UTF-8 in a locale archive: a program that calls setlocale maps this one
# file instead of opening the twelve files of /usr/lib/locale/C.utf8, which
# cost milliseconds per exec on overlay file systems.
chroot "$rootfs" /usr/bin/localedef --add-to-archive --replace /usr/lib/locale/C.utf8
# Programs start without the storage driver's daemon where they can. On
# fuse-overlayfs every symlink of the root file system that a path follows
# (/lib, /lib64, /bin) and every file opened there is a round trip to the
# container's daemon; /usr, shared from the engine's own disk, is not. Each
# dynamically linked program's loader reads /etc/ld.so.cache and loads its
# libraries by the paths listed there: the cache now lists
# /usr/lib/x86_64-linux-gnu (the same directory as /lib/x86_64-linux-gnu) and
# lives under /usr, /etc/ld.so.cache being a symlink to it (one round trip
# instead of four: open, attributes, access list, release), and the loader's
# own link in /usr/lib64 points within /usr rather than through /lib. An
# ldconfig run later (a package install in a task's image) writes a plain
# /etc/ld.so.cache over the symlink, in the same order, and works as before.
conf="$rootfs/etc/ld.so.conf.d/x86_64-linux-gnu.conf"
printf '# Multiarch support, /usr first: see build-rootfs.sh\n/usr/local/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n' >"$conf"
chroot "$rootfs" /usr/sbin/ldconfig -C /usr/lib/ld.so.cache
ln -sfn ../usr/lib/ld.so.cache "$rootfs/etc/ld.so.cache"
ln -sfn ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$rootfs/usr/lib64/ld-linux-x86-64.so.2"
echo "packing $tarball"
tar --numeric-owner -C "$rootfs" -cf "$tarball" .
