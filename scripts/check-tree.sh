#!/usr/bin/env bash
# Fails when the repository tracks something that only makes sense on one machine: a symlink whose
# target is an absolute path (or leaves the tree), a virtual environment, build output, a database.
# A clone at any other path must build and test exactly as this one does.
set -euo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo"
bad=0
while IFS= read -r -d '' entry; do
    mode="${entry%% *}"
    path="${entry#*$'\t'}"
    if [[ $mode == 120000 ]]; then
        target="$(git cat-file -p "$(git rev-parse ":$path")")"
        case "$target" in
            /*) echo "tracked symlink to an absolute path: $path -> $target" >&2; bad=1; continue ;;
        esac
        resolved="$(realpath -m "$(dirname "$path")/$target")"
        case "$resolved" in
            "$PWD"|"$PWD"/*) ;;
            *) echo "tracked symlink leaving the repository: $path -> $target" >&2; bad=1; continue ;;
        esac
    fi
    case "/$path" in
        */.venv|*/.venv/*|*/venv/*|*/.build/*|*/.build|*/__pycache__/*|*/.pytest_cache/*|*.pyc|*.o|*.so|*.swiftmodule|*.sqlite3|*.sqlite3-wal|*.sqlite3-shm|*/dist/*.deb)
            echo "tracked build output or machine-specific file: $path" >&2; bad=1 ;;
    esac
done < <(git ls-files -s -z | tr '\0' '\n' | sed 's/^\([0-7]*\) [0-9a-f]* [0-3]\t/\1 x\t/' | tr '\n' '\0')
if [[ $bad != 0 ]]; then
    echo "the tree tracks machine-specific files (above): remove them with 'git rm --cached' and ignore them" >&2
    exit 1
fi
