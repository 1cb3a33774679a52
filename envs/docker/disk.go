package docker

import (
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// quotaDriver reports whether a storage driver limits a container's
// writable layer with --storage-opt size: overlay2 on xfs (which also needs
// the pquota mount option; see noQuota), btrfs and zfs.
func quotaDriver(driver string, status [][2]string) bool {
	switch driver {
	case "btrfs", "zfs":
		return true
	case "overlay2":
		for _, kv := range status {
			if kv[0] == "Backing Filesystem" && kv[1] == "xfs" {
				return true
			}
		}
	}
	return false
}

// limitDisk bounds what a sandbox may write: the writable layer's size
// where the storage driver supports it, and in every case the size of any
// one file (RLIMIT_FSIZE; a write past it fails with EFBIG), which is the
// only bound on drivers without quotas, such as fuse-overlayfs or overlay2
// on ext4.
func (p *Provider) limitDisk(host *container.HostConfig, res sandbox.Resources) {
	p.mu.Lock()
	quota := p.quota
	p.mu.Unlock()
	if quota {
		host.StorageOpt = map[string]string{"size": strconv.FormatInt(res.DiskBytes, 10)}
	}
	host.Ulimits = append(host.Ulimits, &units.Ulimit{Name: "fsize", Soft: res.DiskBytes, Hard: res.DiskBytes})
}

// noQuota reports whether a create failed because the driver refused a
// size; the provider then stops asking for one.
func (p *Provider) noQuota(err error) bool {
	if !strings.Contains(err.Error(), "storage-opt") && !strings.Contains(err.Error(), "storage opt") {
		return false
	}
	p.mu.Lock()
	p.quota = false
	p.mu.Unlock()
	p.log.Warn("the storage driver refused a per-container size; limiting file sizes only", "err", err)
	return true
}
