# bash completion for ringcap(1) and ringcap-record(1). Installed as
# /usr/share/bash-completion/completions/ringcap, where bash-completion loads it on first use.
# tests/docs/completion_test.sh checks it against `ringcap record --help` and the events ringcap names.
# shellcheck shell=bash disable=SC2207  # COMPREPLY=($(compgen ...)): bash-completion's own idiom

# The options `ringcap record --help` lists, but its internal knobs.
_ringcap_record_opts="-a --all-cpus -C --cpu -p --pid -t --tid -G --cgroup -e --event -F --freq
-c --count -g --call-graph --max-stack -m --mmap-pages -o --output --pipe-backlog --duration
--wakeup-events --wakeup-watermark -r --realtime --no-realtime --collector-nice --backend --threads
--no-direct -z --compression-level -B --no-buildid --buildid-all -N --no-buildid-cache
--buildid-cache-max --no-cut-samples --switch-output --switch-max-files --max-size --json
--flight-recorder --flight-recorder-size --flight-recorder-on-failure --control -q --quiet
-v --verbose -h --help"

# The named events ringcap accepts (src/events/event_spec.cpp, kEvents).
_ringcap_events="cpu-clock task-clock page-faults faults context-switches cs cpu-migrations
migrations minor-faults major-faults alignment-faults emulation-faults dummy cycles cpu-cycles
instructions cache-references cache-misses branches branch-instructions branch-misses bus-cycles
stalled-cycles-frontend stalled-cycles-backend ref-cycles"

# -e LIST: completes the item after the last comma, from the named events and, where tracefs can be
# read, its tracepoints (system:event).
_ringcap_event_list()
{
    local prefix="" item=$cur
    if [[ $cur == *,* ]]; then
        prefix=${cur%,*},
        item=${cur##*,}
    fi
    local candidates=$_ringcap_events dir
    for dir in /sys/kernel/tracing /sys/kernel/debug/tracing; do
        if [[ -r $dir/available_events ]]; then
            candidates+=" $(<"$dir/available_events")"
            break
        fi
    done
    COMPREPLY=($(compgen -P "$prefix" -W "$candidates" -- "$item"))
    # One match: no space after it, so that ",next" or ":modifiers" can follow.
    [[ ${#COMPREPLY[@]} -eq 1 ]] && compopt -o nospace 2>/dev/null
    __ltrim_colon_completions "$cur"
}

# Uses _ringcap's cur, prev, words, cword and split.
_ringcap_record()
{
    # The command to record: after "--", or the first word that is not an option or its value.
    local i
    for ((i = 2; i < cword; i++)); do
        if [[ ${words[i]} == -- ]]; then
            _command_offset $((i + 1))
            return
        fi
    done

    case $prev in
        -e | --event)
            _ringcap_event_list
            return
            ;;
        -o | --output)
            _filedir
            return
            ;;
        --json)
            _filedir
            [[ -z $cur || $cur == - ]] && COMPREPLY+=(-)
            return
            ;;
        -p | --pid | -t | --tid)
            _pids
            return
            ;;
        -G | --cgroup)
            local mnt=/sys/fs/cgroup
            [[ -d $mnt ]] && COMPREPLY=($(cd "$mnt" && compgen -d -S / -- "$cur"))
            compopt -o nospace 2>/dev/null
            return
            ;;
        -F | --freq)
            COMPREPLY=($(compgen -W "max" -- "$cur"))
            return
            ;;
        --call-graph)
            COMPREPLY=($(compgen -W "fp dwarf dwarf," -- "$cur"))
            return
            ;;
        --backend)
            COMPREPLY=($(compgen -W "uring epoll" -- "$cur"))
            return
            ;;
        --threads)
            # Only with "=": a separate word is a number or the command.
            if [[ $split == true ]]; then
                COMPREPLY=($(compgen -W "cpu core package numa" -- "$cur"))
                return
            fi
            ;;
        --control)
            # fifo:CTL[,ACK] or fd:CTL[,ACK]: the FIFOs' paths after "fifo:".
            if [[ $split == true ]]; then
                if [[ $cur == fifo:* ]]; then
                    local p=${cur#fifo:}
                    COMPREPLY=($(compgen -f -P fifo: -- "$p"))
                else
                    COMPREPLY=($(compgen -W "fifo: fd:" -- "$cur"))
                fi
                compopt -o nospace 2>/dev/null
                return
            fi
            ;;
        --switch-output)
            if [[ $split == true ]]; then
                COMPREPLY=($(compgen -W "signal" -- "$cur"))
                return
            fi
            ;;
        -C | --cpu | -c | --count | --max-stack | -m | --mmap-pages | --pipe-backlog | --duration | \
            --wakeup-events | --wakeup-watermark | -r | --realtime | --collector-nice | \
            --switch-max-files | --max-size | --buildid-cache-max | --flight-recorder-size)
            return  # a value of the user's
            ;;
    esac
    [[ $split == true ]] && return

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$_ringcap_record_opts" -- "$cur"))
        return
    fi
    # A word that is not an option starts the command, as with perf record.
    _command_offset "$cword"
}

_ringcap()
{
    # -s: "--opt=value" is split (split set); -n :: "system:event" stays one word.
    local cur prev words cword split
    _init_completion -s -n : || return
    if ((cword == 1)); then
        COMPREPLY=($(compgen -W "record --version --help" -- "$cur"))
        return
    fi
    [[ ${words[1]} == record ]] && _ringcap_record
} &&
    complete -F _ringcap ringcap

# ex: filetype=sh
