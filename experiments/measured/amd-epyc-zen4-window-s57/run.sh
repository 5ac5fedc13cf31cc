set -x
uptime
for i in 1 2 3; do
  env PROBE_CPU_TIME=1 /work/main/experiments/probes/target/release/burn-probes mechanism-cost --variant mlp-sample --out mlp-$i.csv
  for v in plain valid-model autodiff; do env PROBE_CPU_TIME=1 /work/main/experiments/probes/target/release/burn-probes train-validate --quick --variant $v --out tv-$v-$i.csv; done
  for v in plain/matmul plain/add plain/relu; do env PROBE_CPU_TIME=1 /work/main/experiments/probes/target/release/burn-probes op-cost --quick --variant $v --out op-${v#plain/}-$i.csv; done
done
uptime
