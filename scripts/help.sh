# shellcheck shell=bash
# Sourced, not run: the first command of every script in scripts/, so that `-h` or `--help` anywhere in its
# arguments prints its usage and changes nothing:
#   . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"
# prints the script's header comment (what it does, examples) and its knobs (its `VAR=${VAR:-default}` lines,
# with their comments), then exits 0 before the script runs; without -h/--help it does nothing. A wrapper whose
# arguments and knobs go on to another script says which, to list that one's knobs too:
#   HELP_KNOBS_OF=run_gsm8k_grpo.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"
# A script whose knobs are declared in Python (the launcher's: recipes/launch/knobs.py) names that module instead;
# they are listed by running it with Python's own library only (python3 -S), so --help needs no env:
#   HELP_KNOBS_FROM=recipes.launch.knobs . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"
for _help_arg in "$@"; do
  case "$_help_arg" in
    -h|--help)
      _help_knobs() {  # script file [names to leave out]: its knob lines and the comment lines that continue them
        local module
        module=$(sed -n 's/^HELP_KNOBS_FROM=\([A-Za-z0-9_.]*\) .*/\1/p' "$1")
        if [ -n "$module" ]; then  # declared in Python: listed by it, from the repo's root, writing nothing
          # shellcheck disable=SC2086  # the names to leave out are separate arguments
          (cd "$(dirname "$1")/.." && python3 -B -S -m "$module" ${2:-}); return
        fi
        # a knob line is the assignment alone (and its comment): a line that goes on to run something is not one
        awk -v skip=" ${2:-} " '
          /^(export )?[A-Z][A-Z0-9_]*=\$\{[A-Z][A-Z0-9_]*:?-/ {
            code = $0; sub(/[ \t]+#.*$/, "", code); name = $0; sub(/^export /, "", name); sub(/=.*/, "", name)
            if (code ~ /\}$/ && index(skip, " " name " ") == 0) { sub(/^export /, ""); print "  " $0; knob = 1; next }
          }
          knob && /^ +# / { print "  " $0; next } { knob = 0 }' "$1"
      }
      _help_sets() {  # script file: NAME=value for each variable it gives a value of its own to pass on: its knob
        # lines, `export NAME=...`, and NAME=value before the command that runs another script
        awk '{ line = $0; sub(/(^|[ \t])#.*$/, "", line); n = split(line, word, /[ \t]+/); first = (word[1] == "" ? 2 : 1)
               if (word[first] == "export") { for (i = first + 1; i <= n; i++) if (word[i] ~ /^[A-Z][A-Z0-9_]*=/) print word[i]; next }
               for (i = first; i <= n && word[i] ~ /^[A-Z][A-Z0-9_]*=/ && word[i] !~ /\$\(/; i++) ;
               if (i > first && (word[i] == "exec" || word[i] == "bash")) { for (j = first; j < i; j++) print word[j]; next }
               if (line ~ /^[A-Z][A-Z0-9_]*=\$\{/) print word[1] }' "$1"
      }
      echo "scripts/$(basename "${BASH_SOURCE[1]}"):"
      # the header: the comment lines after the shebang, up to the first line that is not a comment (a directive
      # such as #SBATCH as it is written)
      awk 'NR == 1 && /^#!/ { next } /^#[A-Z]/ { print "  " $0; next } /^#/ { sub(/^# ?/, "  "); print; next }
           { exit }' "${BASH_SOURCE[1]}"
      _help_own=$(_help_knobs "${BASH_SOURCE[1]}")
      echo
      echo "knobs: environment variables, as the script reads them (VAR=\${VAR:-default})"
      if [ -n "$_help_own" ]; then echo "$_help_own"; fi
      if [ -n "${HELP_KNOBS_OF:-}" ]; then  # the other script's knobs, less those this one sets itself
        _help_set=$(_help_sets "${BASH_SOURCE[1]}")
        _help_names=$(printf '%s\n' "$_help_set" | sed 's/=.*//' | sort -u | tr '\n' ' ')
        echo "${_help_own:+and }those of scripts/$HELP_KNOBS_OF, which it runs:"
        _help_knobs "$(dirname "${BASH_SOURCE[1]}")/$HELP_KNOBS_OF" "$_help_names"
        _help_mine=" $(printf '%s\n' "$_help_own" | sed -n 's/^  \([A-Z][A-Z0-9_]*\)=.*/\1/p' | tr '\n' ' ')"
        _help_fixed=$(printf '%s\n' "$_help_set" | grep -v '=\${' | while IFS= read -r _a; do
          case "$_help_mine" in *" ${_a%%=*} "*) ;; *) printf '%s ' "$_a" ;; esac; done)
        if [ -n "${_help_fixed// /}" ]; then echo "  set by this script: ${_help_fixed% }"; fi
      fi
      exit 0 ;;
  esac
done
unset _help_arg
