# bench/run.sh's workload 15: the workload's own slowdown. Sourced by run.sh (it uses run.sh's BT,
# PERF, RINGCAP, RINGCAP_FLAGS, RUNS, WORK, WORK_ITERATIONS); not meant to run on its own.

slowdown_workload() {
    local z r who out t order work_cmd pages
    local -a cmd
    # The workload's own cost: fixed work on each CPU, timed by itself, alone and under each
    # collector (-a -F 10000 --call-graph dwarf, each tool's default rings). Also under the kernel's
    # sampling alone (benchtool floor: the same events, no ring), and with the kernel also writing
    # each sample into rings of ringcap's size that a reader frees each millisecond unread (floor
    # --ring): the parts no collector can avoid.
    # The two collectors swap places every run, and each run's files are deleted only after it (this
    # disk may be mounted with discard: a deletion's discards would slow whichever tool comes next).
    echo
    echo "workload 15: the workload's own slowdown (benchtool work $WORK_ITERATIONS on each of $(nproc) CPUs; its slowest copy's seconds)"
    work_cmd="for i in \$(seq $(nproc)); do $BT work $WORK_ITERATIONS & done; wait"
    pages=$("$RINGCAP" record -v -a -F 10000 --call-graph dwarf $RINGCAP_FLAGS -o "$WORK/slow-probe.data" -- true 2>&1 |
        sed -n 's/.* ring(s) of \([0-9]*\) data pages.*/\1/p' | head -1)
    rm -f "$WORK/slow-probe.data"
    pages=${pages:-8192}
    echo "  (ringcap's rings here: $pages data pages per CPU; floor --ring uses the same)"
    for z in "" "-z"; do
        : >"$WORK/slow.tsv"
        for r in $(seq 1 "$RUNS"); do
            order="none floor ring perf ringcap"
            [ $((r % 2)) = 0 ] && order="none floor ring ringcap perf"
            for who in $order; do
                out="$WORK/slow-$who.data"
                case $who in
                    none) cmd=(sh -c "$work_cmd") ;;
                    floor) cmd=("$BT" floor 10000 -- sh -c "$work_cmd") ;;
                    ring) cmd=("$BT" floor 10000 --ring "$pages" -- sh -c "$work_cmd") ;;
                    perf) cmd=("$PERF" record -q -a -F 10000 --call-graph dwarf $z -o "$out" -- sh -c "$work_cmd") ;;
                    ringcap) cmd=("$RINGCAP" record -q -a -F 10000 --call-graph dwarf $z $RINGCAP_FLAGS -o "$out" -- sh -c "$work_cmd") ;;
                esac
                sync
                t=$("${cmd[@]}" 2>/dev/null | sort -g | tail -1)
                printf '%s\t%s\t%s\n' "$who" "$r" "$t" >>"$WORK/slow.tsv"
            done
            rm -f "$WORK"/slow-*.data "$WORK"/slow-*.data.old
            sync
        done
        awk -F'\t' -v z="${z:-uncompressed}" "$MEDIAN_AWK"'
            { t[$1, $2] = $3; if ($2 > runs) runs = $2 }
            END {
                for (r = 1; r <= runs; r++) {
                    f[r] = t["floor", r] / t["none", r] - 1
                    p[r] = t["perf", r] / t["none", r] - 1; g[r] = t["ringcap", r] / t["none", r] - 1
                    k[r] = t["ring", r] / t["none", r] - 1
                    pa[r] = p[r] - f[r]; ga[r] = g[r] - f[r]
                    pk[r] = p[r] - k[r]; gk[r] = g[r] - k[r]
                    line = line sprintf(" %.0f/%.0f", 100 * p[r], 100 * g[r])
                    fl = fl sprintf(" %.0f", 100 * f[r])
                    kl = kl sprintf(" %.0f", 100 * k[r])
                    if (r == 1 || t["none", r] < lo) lo = t["none", r]
                    if (r == 1 || t["none", r] > hi) hi = t["none", r]
                    if (f[r] < 0 || k[r] < 0 || p[r] < 0 || g[r] < 0) neg++
                }
                mp = median(p, runs); mg = median(g, runs)
                mpa = median(pa, runs); mga = median(ga, runs)
                mpk = median(pk, runs); mgk = median(gk, runs); mk = median(k, runs)
                printf "  %s: slowdown perf/ringcap per run (%%):%s; median perf +%.1f %%, ringcap +%.1f %% (ratio %.2f)\n",
                    z, line, 100 * mp, 100 * mg, (mp > 0 ? mg / mp : 0)
                printf "  %s: the kernel'"'"'s sampling alone (no ring) per run (%%):%s; above it, median perf %+.1f %%, ringcap %+.1f %% (ratio %.2f)\n",
                    z, fl, 100 * mpa, 100 * mga, (mpa > 0 ? mga / mpa : 0)
                printf "  %s: the kernel'"'"'s sampling and its writing into rings read at no cost, per run (%%):%s; above it, median perf %+.1f %%, ringcap %+.1f %% (ratio %.2f)\n",
                    z, kl, 100 * mpk, 100 * mgk, (mpk > 0 ? mgk / mpk : 0)
                printf "  %s: a collector that cost nothing would be at %.2f of perf'"'"'s slowdown here (median ring floor / median perf)\n",
                    z, (mp > 0 ? mk / mp : 0)
                # Every figure above is a difference of a few points between runs of the same work:
                # the work alone varying more than that, or sampled work running faster than the work
                # alone, means the machine was not quiet (a build, a noisy host).
                printf "  %s: the work alone took %.2f-%.2f s between runs (%.0f %% apart); %d run(s) with sampled work faster than the work alone%s\n",
                    z, lo, hi, 100 * (hi / lo - 1), neg,
                    (hi > 1.1 * lo || neg > 0 ? ": the machine was not quiet, these figures decide nothing" : "")
            }' "$WORK/slow.tsv"
    done
}
