# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Device probe of the rlinfra.verl.storage_lvm role (module rlinfra.verl.storage_lvm_probe). Read-only.

Decides which block devices the role may use and refuses every device that holds data or is in
use, with one line that names the device and the reason.

It never writes to a device. The only state it may change is loading the dm_mod kernel module
(``modprobe dm_mod``) when an LVM layout needs device-mapper and the module is not loaded yet.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import subprocess
from typing import Any, Mapping, Sequence

FS_TYPES_HINT = ("ext2", "ext3", "ext4", "xfs", "btrfs", "vfat", "f2fs", "jfs", "reiserfs", "ntfs", "exfat")
LAYOUTS_LVM = ("striped", "linear")


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    """Runs a command; returns (rc, stdout, stderr); rc 127 when the tool is missing."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def read(path: str, default: str = "") -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return default


def unescape(field: str) -> str:
    """Undoes the octal escapes of /proc/self/mountinfo and /etc/fstab (\\040 for a space...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def human(size: float) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024.0
    return str(size)


class Block:
    """What sysfs says about one block device (a disk, a partition, a dm or md device...)."""

    def __init__(self, sysdir: str):
        self.sysdir = os.path.realpath(sysdir)
        self.name = os.path.basename(self.sysdir)
        self.majmin = read(os.path.join(self.sysdir, "dev"))
        self.is_partition = os.path.exists(os.path.join(self.sysdir, "partition"))
        self.parent = os.path.basename(os.path.dirname(self.sysdir)) if self.is_partition else ""
        self.size = int(read(os.path.join(self.sysdir, "size"), "0") or 0) * 512
        self.ro = read(os.path.join(self.sysdir, "ro"), "0") == "1"
        disk_dir = os.path.dirname(self.sysdir) if self.is_partition else self.sysdir
        self.removable = read(os.path.join(disk_dir, "removable"), "0") == "1"

    def listdir(self, sub: str) -> list[str]:
        try:
            return sorted(os.listdir(os.path.join(self.sysdir, sub)))
        except OSError:
            return []

    @property
    def partitions(self) -> list[str]:
        if self.is_partition:
            return []
        return [d for d in self.listdir("") if os.path.exists(os.path.join(self.sysdir, d, "partition"))]

    @property
    def holders(self) -> list[str]:
        return self.listdir("holders")

    @property
    def slaves(self) -> list[str]:
        return self.listdir("slaves")

    @property
    def dm_name(self) -> str:
        return read(os.path.join(self.sysdir, "dm", "name"))


def block_by_majmin(majmin: str) -> Block | None:
    path = "/sys/dev/block/%s" % majmin
    return Block(path) if os.path.exists(path) else None


def block_by_name(name: str) -> Block | None:
    path = "/sys/class/block/%s" % name
    return Block(path) if os.path.exists(path) else None


def block_of_devnode(path: str) -> Block | None:
    """Block for a /dev node (or a symlink to one), or None when it is not a block device."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return block_by_majmin("%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)))


def underlying(block: Block | None, seen: set[str] | None = None) -> set[str]:
    """Names of the device and everything beneath it: partition -> disk, dm/md -> their slaves."""
    seen = set() if seen is None else seen
    if block is None or block.name in seen:
        return seen
    seen.add(block.name)
    if block.is_partition:
        underlying(block_by_name(block.parent), seen)
    for slave in block.slaves:
        underlying(block_by_name(slave), seen)
    return seen


def read_mounts() -> list[tuple[str, str, str, str]]:
    """[(majmin, mount point, fstype, source)] from /proc/self/mountinfo."""
    mounts = []
    for line in read("/proc/self/mountinfo").splitlines():
        left, dummy, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        mounts.append((fields[2], unescape(fields[4]), rest[0], unescape(rest[1])))
    return mounts


def read_fstab(path: str = "/etc/fstab") -> dict[str, str]:
    """{mount point: source} of /etc/fstab."""
    entries = {}
    for line in read(path).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) >= 2:
            entries[unescape(fields[1]).rstrip("/") or "/"] = unescape(fields[0])
    return entries


def signatures(devnode: str) -> list[dict[str, str]]:
    """Every signature libblkid sees on the device: filesystems, RAID/LVM members, partition tables."""
    found = []
    rc, out, dummy = run(["wipefs", "--json", devnode])  # list mode: reads only
    if rc == 0 and out.strip():
        try:
            for sig in json.loads(out).get("signatures", []):
                found.append(
                    {
                        "type": sig.get("type") or "unknown",
                        "label": sig.get("label") or "",
                        "uuid": sig.get("uuid") or "",
                        "offset": sig.get("offset") or "",
                    }
                )
        except ValueError:
            pass
    rc, out, dummy = run(["blkid", "-p", "-o", "export", devnode])  # low-level probe, no cache
    if rc in (0, 8):  # 8: several signatures ("ambivalent result")
        info = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        known = {s["type"] for s in found}
        for key in ("TYPE", "PTTYPE"):
            if info.get(key) and info[key] not in known:
                found.append(
                    {"type": info[key], "label": info.get("LABEL", ""), "uuid": info.get("UUID", ""), "offset": ""}
                )
        for sig in found:
            if sig["type"] == info.get("TYPE"):
                sig["label"] = sig["label"] or info.get("LABEL", "")
                sig["uuid"] = sig["uuid"] or info.get("UUID", "")
        if rc == 8 and not found:
            found.append({"type": "several signatures (ambivalent)", "label": "", "uuid": "", "offset": ""})
    return found


def describe_signature(sigs: Sequence[Mapping[str, str]], pv_vg: str) -> str:
    """One phrase for what a device holds, the most telling signature first."""
    types = [s["type"] for s in sigs]
    if "LVM2_member" in types:
        return (
            ("is a physical volume of volume group '%s'" % pv_vg)
            if pv_vg
            else "holds an LVM physical volume signature (no volume group)"
        )
    if "linux_raid_member" in types:
        return "is a member of a Linux software RAID (linux_raid_member signature)"
    for sig in sigs:
        if sig["type"] not in ("gpt", "dos", "PMBR", "atari", "sun", "bsd", "mac"):
            extra = []
            if sig["label"]:
                extra.append("label '%s'" % sig["label"])
            if sig["uuid"]:
                extra.append("UUID %s" % sig["uuid"])
            article = "an" if sig["type"][:1].lower() in "aeiou" else "a"
            what = (
                "%s %s filesystem" % (article, sig["type"])
                if sig["type"] in FS_TYPES_HINT or sig["type"].startswith("ext")
                else "%s %s signature" % (article, sig["type"])
            )
            return "holds %s%s" % (what, (" (" + ", ".join(extra) + ")") if extra else "")
    ptypes = [t for t in types if t in ("gpt", "dos", "atari", "sun", "bsd", "mac")] or types
    return "holds a %s partition table" % ptypes[0]


def busy_exclusive(devnode: str) -> bool:
    """True when the kernel refuses an exclusive open: mounted, or held by device-mapper/md/another user."""
    try:
        fd = os.open(devnode, os.O_RDONLY | os.O_EXCL)
    except OSError as exc:
        return exc.errno == errno.EBUSY
    os.close(fd)
    return False


def device_mapper_available() -> bool:
    def present():
        return (
            os.path.exists("/sys/class/misc/device-mapper")
            or re.search(r"\bdevice-mapper\b", read("/proc/misc")) is not None
        )

    if present():
        return True
    run(["modprobe", "dm_mod"])
    return present()


def lvm_pvs() -> dict[str, str]:
    """{device name: vg name} of every LVM physical volume, when LVM is installed."""
    rc, out, dummy = run(["pvs", "--reportformat", "json", "-o", "pv_name,vg_name"])
    result: dict[str, str] = {}
    if rc != 0 or not out.strip():
        return result
    try:
        report = json.loads(out)
    except ValueError:
        return result
    for part in report.get("report", []):
        for pv in part.get("pv", []):
            block = block_of_devnode(pv.get("pv_name", ""))
            if block is not None:
                result[block.name] = pv.get("vg_name", "")
    return result


class Probe:
    def __init__(self, params: Mapping[str, Any]):
        self.p = params
        self.vg = params.get("vg_name", "")
        self.lv = params.get("lv_name", "")
        self.mount_point = (params.get("mount_point") or "/workspace").rstrip("/") or "/"
        self.layout = params.get("layout", "striped")
        self.force = bool(params.get("force"))
        self.stop_after = params.get("stop_after") or ""
        self.mounts = read_mounts()
        self.fstab = read_fstab(params.get("fstab", "/etc/fstab"))
        self.pv_vg = lvm_pvs()
        # device name -> (mount point, mounted device), for everything beneath a mount
        self.mounted_by: dict[str, tuple[str, str]] = {}
        self.root_names = set()
        for majmin, point, _fstype, _source in self.mounts:
            block = block_by_majmin(majmin)
            if block is None:
                continue
            names = underlying(block)
            for name in names:
                self.mounted_by.setdefault(name, (point, block.name))
            if point == "/":
                self.root_names |= names
        self.swap_names = set()
        for line in read("/proc/swaps").splitlines()[1:]:
            block = block_of_devnode(line.split()[0]) if line.split() else None
            if block is not None:
                self.swap_names |= underlying(block)
        self.here = next((m for m in self.mounts if m[1] == self.mount_point), None)

    # -- one device -------------------------------------------------------------------------
    def is_ours_plain(self, block: Block, devnode: str, sigs: Sequence[Mapping[str, str]]) -> bool:
        """Does the device already hold this role's plain (non-LVM) filesystem for the mount point?"""
        fs = [s for s in sigs if s["type"] not in ("gpt", "dos", "PMBR", "LVM2_member", "linux_raid_member")]
        if not fs:
            return False
        if self.here is not None and self.here[0] == block.majmin:
            return True
        source = self.fstab.get(self.mount_point, "")
        if not source:
            return False
        uuids = {s["uuid"] for s in fs if s["uuid"]}
        labels = {s["label"] for s in fs if s["label"]}
        if source.startswith("UUID="):
            return source[5:].strip('"') in uuids
        if source.startswith("LABEL="):
            return source[6:].strip('"') in labels
        target = block_of_devnode(source)
        return target is not None and target.majmin == block.majmin

    def classify(self, devnode: str, explicit: bool) -> dict[str, Any]:
        """{path, name, size, state, reason, kind}. state: new | member | plain_ours | wipe | refused | skipped."""
        info = {"path": devnode, "name": "", "size": 0, "state": "refused", "reason": "", "kind": "", "signatures": []}
        if not os.path.exists(devnode):
            info.update(reason="does not exist", kind="missing")
            return info
        block = block_of_devnode(devnode)
        if block is None:
            info.update(reason="is not a block device", kind="missing")
            return info
        path = "/dev/" + block.name if os.path.exists("/dev/" + block.name) else os.path.realpath(devnode)
        info.update(path=path, name=block.name, size=block.size)
        if explicit and devnode != path:
            info["given"] = devnode
        name = block.name
        sigs = signatures(path)
        info["signatures"] = [s["type"] for s in sigs]

        def refuse(reason, kind):
            info.update(state="refused", reason=reason, kind=kind)
            return info

        if name in self.pv_vg and self.pv_vg[name] == self.vg and self.vg:
            info.update(state="member", reason="is already a physical volume of volume group '%s'" % self.vg)
            return info
        if self.is_ours_plain(block, path, sigs):
            info.update(
                state="plain_ours", reason="already holds this role's plain filesystem for %s" % self.mount_point
            )
            return info
        if name in self.root_names:
            return refuse("holds the root filesystem", "busy")
        if name in self.mounted_by:
            point, source = self.mounted_by[name]
            if source == name:
                return refuse("is in use: it is mounted at %s" % point, "busy")
            return refuse("is in use: %s on it is mounted at %s" % (source, point), "busy")
        if name in self.swap_names:
            return refuse("is in use as swap", "busy")
        holders = block.holders
        if holders:
            described = []
            for holder in holders:
                hb = block_by_name(holder)
                described.append("%s (%s)" % (holder, hb.dm_name) if hb is not None and hb.dm_name else holder)
            return refuse("is in use: held by %s" % ", ".join(described), "busy")
        parts = block.partitions
        if parts:
            return refuse("has a partition table with %d partition(s) (%s)" % (len(parts), ", ".join(parts)), "data")
        if sigs:
            return refuse(describe_signature(sigs, self.pv_vg.get(name, "")), "data")
        if busy_exclusive(path):
            return refuse("is in use: the kernel refuses an exclusive open (opened by another program)", "busy")
        if block.ro:
            return refuse("is read-only", "busy")
        if block.size == 0:
            return refuse("has a size of 0 (no medium or detached)", "busy")
        info.update(state="new", reason="no partition table, no signature, not in use")
        return info

    # -- the whole decision ------------------------------------------------------------------
    def candidates(self) -> tuple[list[dict[str, Any]], bool]:
        devices = self.p.get("devices")
        if isinstance(devices, str):
            devices = "auto" if devices.strip() == "auto" else [d for d in re.split(r"[,\s]+", devices) if d]
        if devices == "auto":
            return self.discover(), True
        if not isinstance(devices, list):
            raise SystemExit("storage_lvm_devices must be a list of devices or 'auto'")
        seen, result = set(), []
        for dev in devices:
            item = self.classify(str(dev), explicit=True)
            key = item["name"] or item["path"]
            if key in seen:
                continue
            seen.add(key)
            result.append(item)
        return result, False

    def discover(self) -> list[dict[str, Any]]:
        pattern = re.compile(self.p.get("discover_pattern") or r"^(nvme[0-9]+n[0-9]+|sd[a-z]+|vd[a-z]+|xvd[a-z]+)$")
        excluded = set()
        for item in self.p.get("discover_exclude") or []:
            block = block_of_devnode(item) if str(item).startswith("/") else block_by_name(str(item))
            excluded.add(block.name if block is not None else os.path.basename(str(item)))
        min_size = int(self.p.get("discover_min_size") or 0)
        result = []
        for name in sorted(os.listdir("/sys/block")):
            if not pattern.search(name):
                continue
            devnode = "/dev/" + name
            if not os.path.exists(devnode):
                continue  # not visible here (for example another container's loop device)
            block = Block("/sys/block/" + name)
            skipped = {
                "path": devnode,
                "name": name,
                "size": block.size,
                "state": "skipped",
                "kind": "",
                "signatures": [],
            }
            if name in excluded:
                result.append(dict(skipped, reason="is excluded by storage_lvm_discover_exclude"))
                continue
            item = self.classify(devnode, explicit=False)
            if item["state"] in ("member", "plain_ours"):
                result.append(item)
                continue
            if item["state"] == "refused":
                result.append(dict(item, state="skipped"))
                continue
            if block.removable:
                result.append(dict(skipped, reason="is removable"))
            elif block.size < min_size:
                result.append(
                    dict(
                        skipped,
                        reason="is smaller than storage_lvm_discover_min_size (%s < %s)"
                        % (human(block.size), human(min_size)),
                    )
                )
            else:
                item["reason"] = "discovered: " + item["reason"]
                result.append(item)
        return result

    def mount_check(self, effective: str, selected: Sequence[Mapping[str, Any]]) -> str:
        """Refuses to mount over a foreign mount or over a non-empty directory."""
        point = self.mount_point
        if self.here is not None:
            block = block_by_majmin(self.here[0])
            if effective == "plain":
                ours = block is not None and selected and block.name == selected[0]["name"]
                want = selected[0]["path"] if selected else "?"
            else:
                want_dm = "%s-%s" % (self.vg.replace("-", "--"), self.lv.replace("-", "--"))
                ours = block is not None and block.dm_name == want_dm
                want = "/dev/mapper/" + want_dm
            if not ours:
                return (
                    "storage_lvm: %s is already mounted from %s (%s), not from the volume this role manages (%s); "
                    "nothing was changed. Unmount it, or set storage_lvm_mount_point to another path%s."
                    % (
                        point,
                        self.here[3],
                        self.here[2],
                        want,
                        ", or storage_lvm_vg_name/storage_lvm_lv_name to adopt an existing LVM volume"
                        if effective != "plain"
                        else "",
                    )
                )
            return ""
        if os.path.isdir(point) and not self.force:
            try:
                entries = sorted(e for e in os.listdir(point) if e != "lost+found")
            except OSError:
                entries = []
            if entries:
                shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
                return (
                    "storage_lvm: refusing to mount over %s: the directory is not empty (%d %s: %s); "
                    "nothing was changed. Move them away, or set storage_lvm_force: true to mount over them "
                    "(they would be hidden, not deleted)."
                    % (point, len(entries), "entry" if len(entries) == 1 else "entries", shown)
                )
        elif os.path.exists(point) and not os.path.isdir(point):
            return "storage_lvm: %s exists and is not a directory; nothing was changed." % point
        return ""

    def report(self, out: Mapping[str, Any], selected: Sequence[Mapping[str, Any]]) -> list[str]:
        """Human lines for the role's report task."""
        if not selected:
            lines = ["storage_lvm: no device to use for %s (discovery found no empty, unused disk)" % self.mount_point]
        else:
            shape = {"striped": "striped LVM volume", "linear": "linear LVM volume", "plain": "plain filesystem"}
            lines = [
                "storage_lvm: %s for %s over %s (%d device%s, %s)"
                % (
                    shape.get(out["layout"], out["layout"]),
                    self.mount_point,
                    ", ".join(i["path"] for i in selected),
                    len(selected),
                    "" if len(selected) == 1 else "s",
                    human(out["total_size"]),
                )
            ]
        if out["new"]:
            lines.append("new: " + ", ".join(out["new"]))
        if out["wipe"]:
            lines.append("to be WIPED (storage_lvm_force): " + ", ".join(out["wipe"]))
        lines.extend("note: " + note for note in out["notes"])
        if out["not_taken"]:
            lines.append("not taken: " + "; ".join("%s %s" % (s["device"], s["reason"]) for s in out["not_taken"]))
        return lines

    def decide(self) -> dict[str, Any]:
        items, auto = self.candidates()
        out = {
            "auto": auto,
            "candidates": items,
            "error": "",
            "notes": [],
            "device_mapper": None,
            "layout": self.layout,
            "requested_layout": self.layout,
        }
        missing = [i for i in items if i["kind"] == "missing"]
        if missing:
            out["error"] = "storage_lvm: %s; nothing was changed." % "; ".join(
                "%s %s" % (i["path"], i["reason"]) for i in missing
            )
            return out
        refused = [i for i in items if i["state"] == "refused"]
        for item in refused:
            if item["kind"] == "data" and self.force:
                item["state"] = "wipe"
                item["reason"] = "forced (storage_lvm_force): " + item["reason"] + "; will be wiped"
        refused = [i for i in items if i["state"] == "refused"]
        if refused:
            data = [i for i in refused if i["kind"] == "data"]
            busy = [i for i in refused if i["kind"] != "data"]
            parts = [
                "%s: it %s" % (i.get("given") and "%s (%s)" % (i["given"], i["path"]) or i["path"], i["reason"])
                for i in refused
            ]
            advice = []
            if data:
                advice.append(
                    "Set storage_lvm_force: true to wipe %s and use %s anyway"
                    % ("it" if len(data) == 1 else "them", "it" if len(data) == 1 else "them")
                )
            if busy:
                advice.append("a device in use is never taken, not even with storage_lvm_force")
            out["error"] = "storage_lvm: refusing %s; nothing was changed. %s." % ("; ".join(parts), "; ".join(advice))
            return out

        selected = [i for i in items if i["state"] in ("new", "member", "plain_ours", "wipe")]
        plain_ours = [i for i in selected if i["state"] == "plain_ours"]
        members = [i for i in selected if i["state"] == "member"]
        effective = self.layout
        if plain_ours:
            others = [i for i in selected if i["state"] != "plain_ours"]
            if others and not auto:
                out["error"] = (
                    "storage_lvm: %s already holds the plain (non-LVM) scratch filesystem of %s, which "
                    "cannot span more devices; nothing was changed. List only %s, or move the data away "
                    "and start over with an LVM layout."
                    % (plain_ours[0]["path"], self.mount_point, plain_ours[0]["path"])
                )
                return out
            for other in others:
                out["notes"].append(
                    "%s not added: the scratch volume is a plain filesystem on %s, which cannot grow "
                    "over more devices" % (other["path"], plain_ours[0]["path"])
                )
            selected = plain_ours[:1]
            if effective != "plain":
                out["notes"].append(
                    "%s keeps its plain filesystem (storage_lvm_layout %s is not applied to an "
                    "existing plain volume)" % (selected[0]["path"], effective)
                )
            effective = "plain"
        elif effective == "plain":
            if members:
                out["error"] = (
                    "storage_lvm: %s is a physical volume of volume group '%s', but storage_lvm_layout is "
                    "plain; nothing was changed. Use storage_lvm_layout striped or linear."
                    % (members[0]["path"], self.vg)
                )
                return out
            if len(selected) > 1:
                out["error"] = (
                    "storage_lvm: storage_lvm_layout plain takes exactly one device, got %d (%s); nothing "
                    "was changed. List one device, or use an LVM layout (striped, linear)."
                    % (len(selected), ", ".join(i["path"] for i in selected))
                )
                return out
        elif self.stop_after not in ("discover", "vg") and selected:
            out["device_mapper"] = device_mapper_available()
            if not out["device_mapper"]:
                if len(selected) == 1 and not members and self.p.get("fallback_plain", True):
                    effective = "plain"
                    out["notes"].append(
                        "the kernel has no device-mapper, so LVM cannot make a logical volume: "
                        "%s is used as a plain filesystem without LVM" % selected[0]["path"]
                    )
                else:
                    out["error"] = (
                        "storage_lvm: the kernel has no device-mapper (dm_mod), so LVM cannot make the "
                        "%s logical volume over %s; nothing was changed. Use one device with "
                        "storage_lvm_layout: plain, or a kernel with device-mapper."
                        % (self.layout, ", ".join(i["path"] for i in selected))
                    )
                    return out
        out["layout"] = effective
        out["selected"] = [i["path"] for i in selected]
        out["new"] = [i["path"] for i in selected if i["state"] in ("new", "wipe")]
        out["wipe"] = [i["path"] for i in selected if i["state"] == "wipe"]
        out["members"] = [i["path"] for i in members]
        out["not_taken"] = [{"device": i["path"], "reason": i["reason"]} for i in items if i["state"] == "skipped"]
        out["total_size"] = sum(i["size"] for i in selected)
        out["nothing"] = not selected
        out["report"] = self.report(out, selected)
        if selected and self.stop_after not in ("discover", "vg"):
            out["error"] = self.mount_check(effective, selected)
        return out


def probe_module(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``storage_lvm_probe`` module's result (:meth:`Probe.decide`; root only), for plain_module.finish:
    ``failed`` and ``msg`` when it failed."""
    if os.geteuid() != 0:
        return dict(failed=True, msg="storage_lvm: the device probe needs root (become: true)")
    out = Probe(params).decide()
    error = out.pop("error", "")
    if error:
        return dict(out, failed=True, msg=error)
    return dict(changed=False, **out)
