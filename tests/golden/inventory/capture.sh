#!/bin/sh
# Prints the keys of the cgroup files our features expose, as "== FILE (where)" then one key per line.
set -u
CG=/sys/fs/cgroup
[ -e $CG/cgroup.controllers ] || mount -t cgroup2 none $CG
echo "== uname"; uname -r
echo "== cgroup.controllers (root)"; tr ' ' '\n' < $CG/cgroup.controllers
for c in memory cpu; do echo "+$c" > $CG/cgroup.subtree_control 2>/dev/null; done
T=$CG/inv_capture.$$
mkdir -p $T/leaf $T/cpuleaf
echo "+memory" > $T/cgroup.subtree_control
sh -c 'echo $$ > '$T'/leaf/cgroup.procs; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'
keys() { echo "== $1 ($2)"; if [ -e "$3" ]; then cut -d' ' -f1 "$3"; else echo "(absent)"; fi; }
for f in memory.stat memory.events memory.events.local memory.swap.events cpu.stat cpu.stat.local; do
	keys "$f" "leaf" "$T/leaf/$f"
	keys "$f" "root" "$CG/$f"
done
echo "+cpu" > $T/cgroup.subtree_control 2>/dev/null
keys "cpu.stat" "cpuleaf" "$T/cpuleaf/cpu.stat"
keys "cpu.stat.local" "cpuleaf" "$T/cpuleaf/cpu.stat.local"
echo "== files (leaf)"; ls $T/leaf
echo "== files (root)"; ls $CG
echo "== cpus possible"; cat /sys/devices/system/cpu/possible
rmdir $T/leaf $T/cpuleaf $T
echo "-cpu" > $CG/cgroup.subtree_control 2>/dev/null
exit 0
