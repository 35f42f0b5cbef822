"""The key tables are the one declaration of the run config: pyproject.toml's
``[tool.flwr.app.config]`` and the key reference of docs/configuration.md are generated from them
(``python -m run_config.reference``) and must be in step; Flower's own loader accepts the table."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from flwr.cli.config_utils import load_and_validate
from flwr.common.config import get_fused_config_from_dir

from run_config.common import COMMON_KEYS, RunSettings
from run_config.declared import PYPROJECT, declared_defaults
from run_config.families import tables
from run_config.keys import Key, at_least, build
from run_config.reference import END, REFERENCE, RESULTS, config_table, key_reference, main, targets
from tasks.errors import ConfigError
from tests.helpers import all_keys

ROOT = PYPROJECT.parent


@pytest.mark.parametrize("target", targets(), ids=lambda t: f"{t.path.name}:{t.what}")
def test_pyproject_and_the_configuration_page_are_in_step_with_the_key_tables(target):
    assert target.difference() is None, (
        f"{target.difference()}; run `python -m run_config.reference`"
    )


def test_every_key_in_pyproject_is_declared_once_and_vice_versa():
    names = [key.name for key in all_keys()]
    assert len(names) == len(set(names)), "a key is declared in two tables"
    declared = declared_defaults()
    assert sorted(declared) == sorted(names)
    for key in all_keys():
        value = declared[key.name]
        assert value == key.default and type(value) is key.kind, key.name


def test_the_generated_table_is_what_flowers_loader_reads():
    """Flower's own loader and validator accept the file, and read every default."""
    config, _ = load_and_validate(PYPROJECT, check_module=False)
    assert config["tool"]["flwr"]["app"]["components"]
    assert get_fused_config_from_dir(ROOT, {}) == declared_defaults()
    generated = tomllib.loads(config_table())["tool"]["flwr"]["app"]["config"]
    assert generated == {key.name: key.default for key in all_keys()}


def test_run_settings_defaults_are_the_tables():
    defaults = RunSettings()
    by_field = {key.field: key for key in COMMON_KEYS}
    assert sorted(by_field) == sorted(f.name for f in fields(RunSettings) if f.name != "raw")
    for name, key in by_field.items():
        assert getattr(defaults, name) == key.default, key.name


def test_each_key_has_one_line_of_help_that_fits_a_table_cell():
    for key in all_keys():
        assert key.help and "\n" not in key.help and "|" not in key.help, key.name


def test_a_default_must_pass_its_own_type_and_check():
    with pytest.raises(TypeError, match="default"):
        Key("x.width", int, 1.5, "a width")
    with pytest.raises(ConfigError, match=r"x.width=0 is not valid; it must be >= 1"):
        Key("x.width", int, 0, "a width", at_least(1))


def _copies(tmp_path: Path) -> tuple[Path, Path]:
    pyproject, page = tmp_path / "pyproject.toml", tmp_path / "configuration.md"
    pyproject.write_text(PYPROJECT.read_text(encoding="utf-8"), encoding="utf-8")
    page.write_text(REFERENCE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "results.md").write_text(RESULTS.read_text(encoding="utf-8"), encoding="utf-8")
    return pyproject, page


def _args(pyproject: Path, page: Path) -> list[str]:
    results = page.parent / "results.md"
    return ["--pyproject", str(pyproject), "--reference", str(page), "--results", str(results)]


def _check(pyproject: Path, page: Path) -> int:
    return main(["--check", *_args(pyproject, page)])


def test_check_names_the_first_difference_and_a_rewrite_touches_only_the_table(tmp_path, capsys):
    pyproject, page = _copies(tmp_path)
    assert _check(pyproject, page) == 0
    text = pyproject.read_text(encoding="utf-8")
    line = text.splitlines().index('"ffgb.hidden" = 32') + 1
    # another table's edits (a comment above the next header, a changed option) must survive
    edited = text.replace('"ffgb.hidden" = 32', '"ffgb.hidden" = 33').replace(
        "[tool.pytest.ini_options]", "# pytest\n[tool.pytest.ini_options]"
    )
    pyproject.write_text(edited, encoding="utf-8")
    assert _check(pyproject, page) == 1
    err = capsys.readouterr().err
    assert f"pyproject.toml:{line}:" in err and '"ffgb.hidden" = 32' in err
    assert "python -m run_config.reference" in err

    assert main(_args(pyproject, page)) == 0
    assert _check(pyproject, page) == 0
    assert pyproject.read_text(encoding="utf-8") == text.replace(
        "[tool.pytest.ini_options]", "# pytest\n[tool.pytest.ini_options]"
    )


def test_check_finds_a_configuration_page_out_of_step(tmp_path, capsys):
    pyproject, page = _copies(tmp_path)
    text = page.read_text(encoding="utf-8")
    page.write_text(
        text.replace("| `feddr.alpha` | float | `1.0` |", "| `feddr.alpha` | float | `1.5` |"),
        encoding="utf-8",
    )
    assert _check(pyproject, page) == 1
    err = capsys.readouterr().err
    assert "configuration.md:" in err and "`feddr.alpha` | float | `1.0`" in err
    page.write_text(text.replace(END, ""), encoding="utf-8")
    assert _check(pyproject, page) == 1
    assert "keys:end" in capsys.readouterr().err


def test_the_reference_lives_in_docs_and_no_longer_in_the_readme():
    assert REFERENCE == ROOT / "docs" / "configuration.md"
    assert "<!-- keys:begin -->" not in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_reference_has_one_table_per_family():
    text = key_reference()
    assert text.count("| key | type | default | meaning |") == len(tables())
    for key in all_keys():
        assert f"| `{key.name}` | {key.kind.__name__} |" in text


def test_build_fills_each_field_from_its_key_or_a_computed_value():
    @dataclass(frozen=True)
    class Widths:
        tree_depth: int
        scale: float = 1.0

    keys = (Key("x.tree-depth", int, 3, "depth"),)
    assert build(Widths, {"x.tree-depth": 4}, keys, scale=2.0) == Widths(4, 2.0)
    with pytest.raises(TypeError, match=r"Widths.scale: no key fills it"):
        build(Widths, {"x.tree-depth": 4}, keys)  # a default is no excuse: say it


def test_the_resume_keys_and_node_keys_are_generated_from_their_declarations(tmp_path, capsys):
    """docs/results.md's resume keys and docs/configuration.md's node-config keys are checked
    like the key reference: a key dropped from either page is found."""
    pyproject, page = _copies(tmp_path)
    results = tmp_path / "results.md"
    text = results.read_text(encoding="utf-8")
    results.write_text(text.replace("`reply-poll-interval`, ", ""), encoding="utf-8")
    assert _check(pyproject, page) == 1
    assert "results.md:" in capsys.readouterr().err
    results.write_text(text, encoding="utf-8")
    page_text = page.read_text(encoding="utf-8")
    row = next(line for line in page_text.splitlines() if line.startswith("| `dataset-max-bytes`"))
    page.write_text(page_text.replace(row + "\n", ""), encoding="utf-8")
    assert _check(pyproject, page) == 1
    assert "the node-config keys" in capsys.readouterr().err
    assert main(_args(pyproject, page)) == 0 and _check(pyproject, page) == 0
