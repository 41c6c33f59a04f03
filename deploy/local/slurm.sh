# A real Slurm 22.05 on this host, as a bash library (sourced by
# deploy/local/demo.sh; tests/support/slurm_cluster.cc does the same in C++):
# munged, slurmctld and one `slurmd -N NODE` per node, from a config in a
# folder of its own on free ports, with fake GPUs (character devices,
# `mknod c 1 3`, listed in gres.conf). Needs root and Debian's slurmctld,
# slurmd, slurm-client and munge (deploy/deps.sh installs them).
#
#   slurm_start DIR NODE:GRES_TYPE:GPUS...   sets SLURM_DIR and SLURM_CONF_FILE
#   slurm_stop                               stops the daemons by pid file

slurm_free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_start() {
  SLURM_DIR=$1; shift
  local host spec node type gpus i list=""
  host=$(hostname)
  mkdir -p "$SLURM_DIR"/{dev,state,spool,log,munge}
  # Ranks (the run_as user) run srun: it reads the config and talks to munged here.
  chmod 0755 "$SLURM_DIR"
  head -c 1024 /dev/urandom >"$SLURM_DIR/munge/munge.key"
  chmod 0400 "$SLURM_DIR/munge/munge.key"
  SLURM_CONF_FILE="$SLURM_DIR/slurm.conf"
  cat >"$SLURM_CONF_FILE" <<CONF
ClusterName=fedgate
SlurmctldHost=$host
SlurmctldPort=$(slurm_free_port)
SlurmdPort=$(slurm_free_port)
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.sock
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid
SlurmdSpoolDir=$SLURM_DIR/spool/%n
StateSaveLocation=$SLURM_DIR/state
SlurmUser=root
SlurmdUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
KillWait=2
CONF
  : >"$SLURM_DIR/gres.conf"
  SLURM_NODES=()
  for spec in "$@"; do
    IFS=: read -r node type gpus <<<"$spec"
    mkdir -p "$SLURM_DIR/dev/$node"
    for i in $(seq 0 $((gpus - 1))); do mknod "$SLURM_DIR/dev/$node/nvidia$i" c 1 3; done
    echo "NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 Port=$(slurm_free_port) CPUs=16 Gres=gpu:$type:$gpus State=UNKNOWN" >>"$SLURM_CONF_FILE"
    echo "NodeName=$node Name=gpu Type=$type File=$SLURM_DIR/dev/$node/nvidia[0-$((gpus - 1))]" >>"$SLURM_DIR/gres.conf"
    list="${list:+$list,}$node"
    SLURM_NODES+=("$node")
  done
  echo "PartitionName=gpu Nodes=$list Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF_FILE"
  chmod 0644 "$SLURM_CONF_FILE" "$SLURM_DIR/gres.conf"
  export SLURM_CONF="$SLURM_CONF_FILE"
  /usr/sbin/munged --socket="$SLURM_DIR/munge/munge.sock" --key-file="$SLURM_DIR/munge/munge.key" \
    --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
    --seed-file="$SLURM_DIR/munge/munge.seed" --force
  /usr/sbin/slurmctld -f "$SLURM_CONF_FILE"
  for node in "${SLURM_NODES[@]}"; do /usr/sbin/slurmd -f "$SLURM_CONF_FILE" -N "$node"; done
  local deadline=$(( $(date +%s) + 30 ))
  until [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" = "${#SLURM_NODES[@]}" ]; do
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "slurm did not come up; slurmctld log:" >&2; tail -20 "$SLURM_DIR/log/slurmctld.log" >&2
      return 1
    fi
    sleep 0.2
  done
}

slurm_stop() {
  [ -n "${SLURM_DIR:-}" ] || return 0
  scancel --user=root 2>/dev/null || true
  local f pid
  for f in "$SLURM_DIR"/slurmd-*.pid "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [ -f "$f" ] && pid=$(cat "$f") && kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 1
  for f in "$SLURM_DIR"/slurmd-*.pid "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [ -f "$f" ] && pid=$(cat "$f") && kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$SLURM_DIR"
  SLURM_DIR=""
}
