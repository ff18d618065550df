# shellcheck shell=bash
# Sourced, not run: the first command of every script in scripts/, so that `-h` or `--help` anywhere in its
# arguments prints its usage and changes nothing:
#   . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"
# prints the script's header comment (what it does, examples) and its knobs (its `VAR=${VAR:-default}` lines,
# with their comments), then exits 0 before the script runs; without -h/--help it does nothing. A wrapper whose
# arguments and knobs go on to another script says which, to list that one's knobs too:
#   HELP_KNOBS_OF=run_gsm8k_grpo.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"
for _help_arg in "$@"; do
  case "$_help_arg" in
    -h|--help)
      _help_knobs() {  # script file: its knob lines and the comment lines that continue them
        awk '/^(export )?[A-Z][A-Z0-9_]*=\$\{[A-Z][A-Z0-9_]*:?-/ { sub(/^export /, ""); print "  " $0; knob = 1; next }
             knob && /^ +# / { print "  " $0; next } { knob = 0 }' "$1"
      }
      echo "scripts/$(basename "${BASH_SOURCE[1]}"):"
      # the header: the comment lines after the shebang, up to the first line that is not a comment
      awk 'NR == 1 && /^#!/ { next } /^#/ { sub(/^# ?/, "  "); print; next } { exit }' "${BASH_SOURCE[1]}"
      _help_own=$(_help_knobs "${BASH_SOURCE[1]}")
      echo
      echo "knobs: environment variables, as the script reads them (VAR=\${VAR:-default})"
      if [ -n "$_help_own" ]; then echo "$_help_own"; fi
      if [ -n "${HELP_KNOBS_OF:-}" ]; then
        echo "${_help_own:+and }those of scripts/$HELP_KNOBS_OF, which it runs:"
        _help_knobs "$(dirname "${BASH_SOURCE[1]}")/$HELP_KNOBS_OF"
      fi
      exit 0 ;;
  esac
done
unset _help_arg
