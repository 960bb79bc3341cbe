"""The tree-hygiene check that CI runs first: a clone at another path must behave like this one."""
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parent.parent
CHECK = REPO / "scripts" / "check-tree.sh"


def make_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("x\n")
    return repo


def track(repo, *paths):
    subprocess.run(["git", "-C", str(repo), "add", "-f", *paths], check=True)


def run_check(repo):
    return subprocess.run(["bash", str(CHECK), str(repo)], capture_output=True, text=True, timeout=60)


def test_the_repository_itself_is_clean():
    result = run_check(REPO)
    assert result.returncode == 0, result.stderr


def test_clean_tree_with_a_relative_symlink_passes(tmp_path):
    repo = make_repo(tmp_path)
    os.symlink("README.md", repo / "LINK.md")
    track(repo, "README.md", "LINK.md")
    result = run_check(repo)
    assert result.returncode == 0, result.stderr


def test_symlink_to_an_absolute_path_fails(tmp_path):
    repo = make_repo(tmp_path)
    os.symlink("/tmp/ci-clone/.venv", repo / ".venv")
    track(repo, "README.md", ".venv")
    result = run_check(repo)
    assert result.returncode == 1
    assert ".venv -> /tmp/ci-clone/.venv" in result.stderr


def test_symlink_leaving_the_tree_fails(tmp_path):
    repo = make_repo(tmp_path)
    os.symlink("../../elsewhere", repo / "out")
    track(repo, "README.md", "out")
    result = run_check(repo)
    assert result.returncode == 1
    assert "leaving the repository: out" in result.stderr


def test_build_output_and_databases_fail(tmp_path):
    repo = make_repo(tmp_path)
    for rel in [".build/debug/glucose-gateway", "gw.sqlite3", "SystemTests/__pycache__/x.pyc"]:
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
        track(repo, rel)
    result = run_check(repo)
    assert result.returncode == 1
    for rel in [".build/debug/glucose-gateway", "gw.sqlite3", "SystemTests/__pycache__/x.pyc"]:
        assert rel in result.stderr
