#!/bin/sh
# The image's entry point.
#   no arguments          crewagent serve --project $CREWAGENT_PROJECT, with a --package for every package
#                         mounted under $CREWAGENT_PACKAGES (a *.bmad file or a folder holding bmad.json,
#                         or that folder itself); with none there, serve offers the bundled examples.
#   arguments starting -  crewagent serve with exactly those flags (nothing added).
#   anything else         run it as a command, e.g. `crewagent validate /packages/team.bmad`.
set -eu
if [ "$#" -gt 0 ]; then
    case "$1" in
        -*) exec crewagent serve "$@" ;;
        *) exec "$@" ;;
    esac
fi
project="${CREWAGENT_PROJECT:-/project}"
packages="${CREWAGENT_PACKAGES:-/packages}"
set -- --project "$project"
if [ -f "$packages/bmad.json" ]; then
    set -- "$@" --package "$packages"
elif [ -d "$packages" ]; then
    for entry in "$packages"/*; do
        if [ -f "$entry" ] && [ "${entry%.bmad}" != "$entry" ]; then
            set -- "$@" --package "$entry"
        elif [ -f "$entry/bmad.json" ]; then
            set -- "$@" --package "$entry"
        fi
    done
fi
exec crewagent serve "$@"
