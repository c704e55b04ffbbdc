# Weft's layers and what each may include: the DAG that docs/architecture.md
# draws, that CMake enforces (cmake/layers.cmake) and that
# scripts/include-graph.sh and scripts/check-layers.sh check. Sourced, not run.
#
# DEPS[layer] lists the layers directly below it; a layer may include those
# and, transitively, what they may include. cni, ipam and fw do not use each
# other; the agent uses the plugin (weftd reclaims vanished attachments with
# the plugin's teardown, plugin/reclaim.h); the runtime uses neither. weftd's
# rooms: the API clients (kube, etcd) use only base and sys (the HTTP client,
# weft_http, is in sys); the overlay and policy never use each other; the
# agent composes them all. The Service proxy (services) uses the nftables
# layer and kube's informers and knows nothing of policy or the overlay; the
# agent composes it.
declare -A DEPS=(
  [base]=""
  [sys]="base"
  [cni]="base"
  [ipam]="sys"
  [fw]="sys"
  [plugin]="cni ipam fw"
  [runtime]="cni sys"
  [kube]="sys"
  [etcd]="sys"
  [overlay]="sys"
  [policy]="kube fw"
  [services]="kube"
  [agent]="plugin kube etcd overlay policy services"
  [doctor]="agent runtime"
  [cmd]="doctor"
  # Test and benchmark helpers (tests/testutil, tests/e2e, bench) and the
  # tests themselves (tests/integration, tests/demo, tests/fuzz); services
  # for the health check servers' netns test until weftd composes the proxy.
  [testutil]="sys"
  [e2e]="agent testutil"
  [bench]="agent"
  [tests]="doctor e2e testutil services"
)
LAYERS="base sys cni ipam fw plugin runtime kube etcd overlay services policy agent doctor cmd testutil e2e bench tests"
# The product's layers: their libraries link exactly the layers DEPS names.
# A helper library (weft_testutil, weft_e2e_cluster, weft_bench_lib) may link
# less than its layer's programs do.
PRODUCT_LAYERS="base sys cni ipam fw plugin runtime kube etcd overlay services policy agent doctor"

# closure <layer>: the layers <layer> may include, itself first.
closure() {
  local todo="$1" seen="" l
  while [ -n "$todo" ]; do
    l=${todo%% *}; todo=${todo#"$l"}; todo=${todo# }
    case " $seen " in *" $l "*) continue ;; esac
    seen="$seen $l"
    todo="$todo ${DEPS[$l]}"; todo=${todo# }; todo=${todo% }
  done
  echo "${seen# }"
}

# layer_of_file <path from the checkout>: the layer a source file belongs to.
layer_of_file() {
  case "$1" in
    src/*) local r=${1#src/}; echo "${r%%/*}" ;;
    tests/testutil/*) echo testutil ;;
    tests/e2e/*) echo e2e ;;
    tests/*) echo tests ;;
    bench/*) echo bench ;;
    cmd/*) echo cmd ;;
  esac
}
