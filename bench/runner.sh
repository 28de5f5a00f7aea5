# bench/run.sh's runs: one collector run with what perf reads from its file (run_one), and the
# runs of a workload, the two tools alternating (run_workload). Sourced by run.sh (it uses run.sh's
# WORK, RESULTS, PERF, RINGCAP, BT, RUNS, DURATION, RING_FLAG, RINGCAP_EXTRA, RINGCAP_FLAGS,
# THROTTLE_CG, NOTES and its helpers quiet_disk, punt_start, punt_stop); not meant to run on its own.

# run_one WL TOOL RUN ARGS...  -> appends one row to $RESULTS:
# wl tool run status samples lost lostrec cpu_s wall_s bytes maxrss_kb perf_ok selfcheck punted
run_one() {
    local wl=$1 tool=$2 run=$3; shift 3
    local out="$WORK/$wl-$tool-$run.data" res="$WORK/$wl-$tool-$run.res" log="$WORK/$wl-$tool-$run.log"
    local -a cmd
    if [ "$tool" = perf ]; then
        cmd=("$PERF" record -q $PERF_EXTRA -o "$out" "${RING_FLAG[@]}" "$@" -- sleep "$DURATION")
        [ -n "$PERF_NICE" ] && cmd=(nice -n "$PERF_NICE" "${cmd[@]}")
    else
        cmd=("$RINGCAP" record -o "$out" "${RING_FLAG[@]}" "${RINGCAP_EXTRA[@]}" $RINGCAP_FLAGS "$@" -- sleep "$DURATION")
    fi
    # Workload 14: the collector (and only it) under the write limit.
    [ -n "$THROTTLE_CG" ] && cmd=(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$THROTTLE_CG" "${cmd[@]}")
    echo "${cmd[*]}" >"$log"
    local status=0
    # Start on a quiet disk: perf leaves its file (over 1 GB at 40 kHz dwarf) in the page cache, and
    # its writeback during the next run took disk bandwidth from that run (ringcap, writing as it
    # captures, lost up to 44 % in the run after a perf run; 0 after a sync).
    quiet_disk
    punt_start "$WORK/punts"
    "$BT" run "$res" -- "${cmd[@]}" 2>>"$log" >/dev/null || status=$?
    local punted
    punted=$(punt_stop "$WORK/punts")
    local wall=0 user=0 sys=0 rss=0
    [ -s "$res" ] && read -r wall user sys rss _ <"$res"
    local bytes=0 samples=0 lost=0 lostrec=0 perf_ok=0 self="-" rc=0
    if [ -f "$out" ]; then
        bytes=$(stat -c %s "$out")
        local stats
        stats=$("$PERF" report --stats -i "$out" 2>&1) || rc=$?
        echo "$stats" >"$WORK/$wl-$tool-$run.stats"
        if [ $rc -eq 0 ] && ! grep -qE "failed to process|^Error" <<<"$stats"; then perf_ok=1; fi
        # Aggregated SAMPLE count, and LOST_SAMPLES summed over the non-dummy per-event sections.
        read -r samples lost < <(awk '
            /^Aggregated stats:/ { agg = 1; next }
            agg && /^ *SAMPLE events:/ && !have { samples = $3; have = 1 }
            /^[^ ].* stats:$/ { agg = 0; ev = $1; next }
            ev != "" && ev !~ /^dummy/ && /^ *LOST_SAMPLES events:/ { lost += $3 }
            END { printf "%d %d\n", samples, lost }' <<<"$stats")
        lostrec=$("$PERF" script --show-lost-events -F cpu -i "$out" 2>/dev/null \
            | awk '/PERF_RECORD_LOST lost/ { s += $NF } END { printf "%d\n", s }') || true
        # The workload's profile (the busy loops', not the collectors' own), for comparing a
        # throttled capture with an unthrottled one (workload 14).
        "$PERF" report --stdio --no-children --comm benchtool --percentage relative --sort sym -i "$out" 2>/dev/null \
            | awk '/^ *[0-9.]+%/ { print $1, $NF }' | head -30 >"$WORK/$wl-$tool-$run.top" || true
        if [ "$tool" = ringcap ]; then
            # Cross-check ringcap's own summary against perf's reading.
            local line rs rl
            line=$(grep -E '^ringcap: samples=' "$log" | tail -1 || true)
            if [ -n "$line" ]; then
                rs=$(sed -E 's/.* samples=([0-9]+).*/\1/' <<<"$line")
                # The sampled events' kernel-lost and dropped (back-pressure: LOST_SAMPLES too), as
                # perf's count (the tracking event's are apart).
                rl=$(awk '/^  event .*: samples [0-9]+, kernel-lost [0-9]+/ {
                        for (i = 1; i <= NF; i++) if ($i == "kernel-lost" || $i == "dropped") { v = $(i + 1); sub(",", "", v); s += v }
                    } END { printf "%d\n", s }' "$log")
                if [ "$rs" = "$samples" ]; then self="ok"; else self="samples:self=$rs,perf=$samples"; fi
                if [ "$rl" != "$lost" ] && [ "$rl" != "$lostrec" ]; then
                    [ "$self" = ok ] && self=""
                    self="${self:+$self;}lost:self=$rl,perf=$lost/$lostrec"
                fi
            fi
        fi
        rm -f "$out" "$out.old"
    fi
    if [ "$status" -ne 0 ]; then
        { echo "  ! $wl $tool run $run: exit status $status; last lines of its stderr:"
          tail -n 5 "$log" | sed 's/^/      /'; } >>"$NOTES"
    fi
    if [ -s "$WORK/$wl-$tool-$run.stats" ] && [ "$perf_ok" = 0 ]; then
        local why
        why=$(grep -m1 -E "failed to process|Error|error" "$WORK/$wl-$tool-$run.stats" || echo "exit status $rc")
        echo "  ! $wl $tool run $run: perf report could not read the file to the end: $why" >>"$NOTES"
    fi
    if [ "$tool" = ringcap ] && grep -q 'ring memory for' "$log"; then
        echo "  ! $wl ringcap run $run: ringcap used smaller rings than asked: $(grep -m1 'ring memory for' "$log")" >>"$NOTES"
    fi
    if [ "$tool" = ringcap ] && [ "$self" != ok ] && [ "$self" != "-" ]; then
        echo "  ! $wl ringcap run $run: ringcap's own summary disagrees with what perf read: $self" >>"$NOTES"
    fi
    local cpu
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.6f", u + s }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$wl" "$tool" "$run" "$status" "$samples" "$lost" "$lostrec" "$cpu" "$wall" "$bytes" "$rss" "$perf_ok" "$self" \
        "$punted" >>"$RESULTS"
}

# run_workload WL TOOLS ARGS...: RUNS runs per tool, alternating which tool goes first.
run_workload() {
    local wl=$1 tools=$2; shift 2
    local r t
    for r in $(seq 1 "$RUNS"); do
        if [ "$tools" = both ]; then
            if [ $((r % 2)) = 1 ]; then
                run_one "$wl" perf "$r" "$@"; run_one "$wl" ringcap "$r" "$@"
            else
                run_one "$wl" ringcap "$r" "$@"; run_one "$wl" perf "$r" "$@"
            fi
        else
            run_one "$wl" "$tools" "$r" "$@"
        fi
    done
}
