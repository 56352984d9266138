#!/bin/sh
# The image's entry point.
#   no arguments          crewagent serve with the defaults below.
#   arguments starting -  crewagent serve with the defaults below plus those flags; a flag given here
#                         replaces only its own default (--project, --package, --config).
#   anything else         run it as a command, e.g. `crewagent validate /packages/team.bmad`.
# The defaults:
#   --project             none: serve reads CREWAGENT_PROJECT itself (/project in the image).
#   --package …           one for every package mounted under $CREWAGENT_PACKAGES (a *.bmad or *.zip file
#                         or a folder holding bmad.json, or that folder itself); with none there, serve
#                         offers the bundled examples (or the packages the config file lists).
#   --config FILE         /config/crewagent.yml (or CREWAGENT_CONFIG_MOUNT) when that file is mounted
#                         and CREWAGENT_CONFIG is not set (serve reads CREWAGENT_CONFIG itself).
set -eu
if [ "$#" -gt 0 ]; then
    case "$1" in
        -*) ;;
        *) exec "$@" ;;
    esac
fi

has_flag() {  # has_flag --name "$@": was --name (or --name=…) given?
    wanted="$1"
    shift
    for word in "$@"; do
        case "$word" in
            "$wanted" | "$wanted"=*) return 0 ;;
        esac
    done
    return 1
}

defaults=""
add_default() {  # quoted for `eval set --`, so paths with spaces stay one word
    for word in "$@"; do
        escaped=$(printf '%s' "$word" | sed "s/'/'\\\\''/g")
        defaults="$defaults '$escaped'"
    done
}

packages="${CREWAGENT_PACKAGES:-/packages}"
if ! has_flag --package "$@"; then
    if [ -f "$packages/bmad.json" ]; then
        add_default --package "$packages"
    elif [ -d "$packages" ]; then
        for entry in "$packages"/*; do
            case "$entry" in
                *.bmad | *.zip) [ -f "$entry" ] && add_default --package "$entry" ;;
                *) [ -f "$entry/bmad.json" ] && add_default --package "$entry" ;;
            esac
        done
    fi
fi
config_file="${CREWAGENT_CONFIG_MOUNT:-/config/crewagent.yml}"
if ! has_flag --config "$@" && [ -z "${CREWAGENT_CONFIG:-}" ] && [ -f "$config_file" ]; then
    add_default --config "$config_file"
fi
eval "set -- $defaults \"\$@\""
exec crewagent serve "$@"
