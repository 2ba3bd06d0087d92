"""Config schema: strict types for TOML config files and stored configurations (issue 15 item 12)."""

import dataclasses
import json

import pytest

from mpidwe.core.config import (PreprocessConfig, SynthConfig, TrainConfig, from_json, from_mapping,
    parse_command, to_dict, to_json)
from mpidwe.core.errors import ConfigError

from conftest import error_lines, run_py


def parse_toml(tmp_path, text, *argv):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return parse_command(TrainConfig, ["--config", str(path), *argv], prog="t", description="",
                         config_file_flag=True), str(path)


def refused(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        parse_command(TrainConfig, ["--config", str(path)], prog="t", description="", config_file_flag=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(path) in msg    # the source is named
    return msg


@pytest.mark.parametrize("text, expected", [
    ("dim = 1.5\n", "--dim must be an integer, got 1.5 (float)"),
    ("dim = true\n", "--dim must be an integer, got True (bool)"),
    ("window = 2.5\n", "--window must be an integer, got 2.5 (float)"),
    ("sync_every = 1e3\n", "--sync-every must be an integer, got 1000.0 (float)"),
    ("sync-every = 1e3\n", "--sync-every must be an integer, got 1000.0 (float)"),
    ('dim = "100"\n', "--dim must be an integer, got '100' (str)"),
    ('lr = "0.1"\n', "--lr must be a number, got '0.1' (str)"),
    ("lr = false\n", "--lr must be a number, got False (bool)"),
    ("force = 1\n", "--force must be true or false, got 1 (int)"),
    ('progress = "no"\n', "--progress must be true or false, got 'no' (str)"),
    ("out = 5\n", "--out must be a string, got 5 (int)"),
    ("resume = 1\n", "--resume must be a string, got 1 (int)"),
    ("corpus = [\"a.h5\"]\n", "--corpus must be a string, got ['a.h5'] (list)"),
    ('eval_sim = "file"\n', '--eval-sim must be a list of strings, got \'file\' (str)'),
    ("eval_analogy = [1, 2]\n", "--eval-analogy must be a list of strings, got [1, 2] (list)"),
])
def test_wrong_types_in_toml_are_refused(tmp_path, text, expected):
    assert expected in refused(tmp_path, text)


def test_a_string_for_a_list_suggests_the_list_form(tmp_path):
    assert 'eval_sim = ["file"]' in refused(tmp_path, 'eval_sim = "file"\n')


@pytest.mark.parametrize("text, expected", [
    ('model = "sg"\n', "--model must be one of skipgram, cbow, got 'sg'"),
    ('sync = "DENSE"\n', "--sync must be one of auto, dense, sparse, average, got 'DENSE'"),
    ('kernel = "cuda"\n', "--kernel must be one of auto, numba, torch, triton, got 'cuda'"),
])
def test_bad_choices_in_toml_are_refused(tmp_path, text, expected):
    assert expected in refused(tmp_path, text)


def test_good_toml_is_accepted(tmp_path):
    cfg, _ = parse_toml(tmp_path, 'dim = 48\nlr = 1\nsample = 0\nguard_max_abs = 50\nsync_every = 1000\n'
                                  'model = "cbow"\nforce = true\nresume = "auto"\n'
                                  'eval_sim = ["a.tsv"]\neval-analogy = []\n')
    assert (cfg.dim, cfg.sync_every, cfg.model, cfg.force, cfg.resume) == (48, 1000, "cbow", True, "auto")
    assert cfg.lr == 1.0 and type(cfg.lr) is float           # an int is fine where a number is expected
    assert type(cfg.sample) is float and type(cfg.guard_max_abs) is float
    assert cfg.eval_sim == ("a.tsv",) and cfg.eval_analogy == ()   # lists become tuples


def test_command_line_flags_keep_working_and_override_the_file(tmp_path):
    cfg, _ = parse_toml(tmp_path, "dim = 48\n", "--dim", "64", "--lr", "0.05", "--eval-sim", "x", "y",
                        "--no-progress", "--sync", "dense")
    assert (cfg.dim, cfg.lr, cfg.eval_sim, cfg.progress, cfg.sync) == (64, 0.05, ("x", "y"), False, "dense")
    # a bad flag in the command line overrides (and so hides) a bad value in the file
    cfg, _ = parse_toml(tmp_path, "dim = 1.5\n", "--dim", "8")
    assert cfg.dim == 8
    with pytest.raises(ConfigError, match="invalid int value"):
        parse_toml(tmp_path, "", "--dim", "1.5")


def test_the_options_the_user_gave_are_known(tmp_path):
    """A resumed run takes the options the user left out from its checkpoint, so the parser
    tells given from default: flags and the --config file's keys, not the defaults."""
    toml = tmp_path / "c.toml"
    toml.write_text("window = 3\neval-sim = []\n")
    cfg, given = parse_command(TrainConfig, ["--config", str(toml), "--dim", "100", "--no-progress",
                                             "--resume", "auto"], prog="t", description="",
                               config_file_flag=True, return_given=True)
    assert given == {"window", "eval_sim", "dim", "progress", "resume"}
    assert cfg.dim == 100 and cfg.window == 3 and cfg.epochs == 5     # 100 and 5 are the defaults


def test_other_commands_parse_their_command_lines_unchanged():
    p = parse_command(PreprocessConfig, ["a.txt", "b.txt", "--max-vocab", "10", "--normalize", "text8"],
                      prog="p", description="")
    assert p.inputs == ("a.txt", "b.txt") and p.max_vocab == 10 and p.normalize == "text8"
    s = parse_command(SynthConfig, ["--tokens", "1000", "--force"], prog="s", description="")
    assert s.tokens == 1000 and s.force is True
    from mpidwe.evaluate.config import EvaluateConfig
    e = parse_command(EvaluateConfig, ["v.txt", "--similarity", "s.tsv", "--pip-alpha", "1"],
                      prog="e", description="")
    assert e.similarity == ("s.tsv",) and e.pip_alpha == 1.0


def test_from_mapping_checks_every_config_class():
    with pytest.raises(ConfigError, match=r"--max-vocab must be an integer, got 2\.5 \(float\) in here"):
        from_mapping(PreprocessConfig, {"inputs": ["a"], "max_vocab": 2.5}, source="here")
    with pytest.raises(ConfigError, match="inputs must be a list of strings"):
        from_mapping(PreprocessConfig, {"inputs": "a.txt"}, source="here")
    with pytest.raises(ConfigError, match="--normalize must be one of none, text8"):
        from_mapping(PreprocessConfig, {"inputs": ["a"], "normalize": "nfkc"}, source="here")
    with pytest.raises(ConfigError, match="--tokens must be an integer"):
        from_mapping(SynthConfig, {"tokens": 1e6}, source="here")
    assert from_mapping(PreprocessConfig, {"inputs": ["a"], "max_vocab": None}).max_vocab is None
    with pytest.raises(ConfigError, match="--dim must be an integer, got None"):
        from_mapping(TrainConfig, {"dim": None})


def test_the_local_rate_cap_defaults_by_loss_and_is_stored_as_a_number():
    # hierarchical softmax lost analogy points at 4 ranks and diverged at 8 under negative
    # sampling's cap of 0.2 (docs/lab/sync-modes.md): its default cap is 2 x --lr
    assert TrainConfig().max_local_lr == 0.2
    assert TrainConfig(loss="hs").max_local_lr == 0.05
    assert TrainConfig(loss="hs", model="cbow", lr=0.05).max_local_lr == 0.1
    assert TrainConfig(loss="hs", max_local_lr=0.2).max_local_lr == 0.2     # given: kept
    assert to_dict(TrainConfig(loss="hs"))["max_local_lr"] == 0.05
    assert from_json(TrainConfig, to_json(TrainConfig(loss="hs"))) == TrainConfig(loss="hs")
    with pytest.raises(ConfigError, match="--max-local-lr must be >= 0"):
        TrainConfig(max_local_lr=-1.0)


@pytest.mark.parametrize("cfg", [
    TrainConfig(),
    TrainConfig(corpus="c.h5", resume="auto", eval_sim=("a", "b"), lr=0.5, checkpoint_minutes=2.5,
                model="cbow", force=True),
    PreprocessConfig(inputs=("a.txt", "-"), max_vocab=7),
    SynthConfig(),
], ids=["train-default", "train", "preprocess", "synth"])
def test_stored_configuration_round_trips(cfg):
    back = from_json(type(cfg), to_json(cfg))
    assert back == cfg
    for f in dataclasses.fields(cfg):
        assert type(getattr(back, f.name)) is type(getattr(cfg, f.name)), f.name
    assert json.loads(json.dumps(to_dict(cfg))) == to_dict(cfg)
    assert to_dict(back) == to_dict(cfg)


def test_train_command_exits_2_with_one_line(tmp_path):
    toml = tmp_path / "bad.toml"
    toml.write_text("window = 2.5\n")
    proc = run_py(["-m", "mpidwe.train", "--config", str(toml), "--corpus", str(tmp_path / "missing.h5"),
                   "--out", str(tmp_path / "run")], timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "--window must be an integer, got 2.5 (float)" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_repeated_list_flag_adds_to_the_list(tmp_path):
    """--eval-analogy a --eval-analogy b evaluates both (it kept only b); the same file twice
    is refused, and a flag still replaces the --config file's list."""
    cfg = parse_command(TrainConfig, ["--eval-analogy", "a.txt", "--eval-sim", "s.tsv", "--eval-analogy", "b.txt",
                                      "c.txt"], prog="t", description="", config_file_flag=True)
    assert cfg.eval_analogy == ("a.txt", "b.txt", "c.txt") and cfg.eval_sim == ("s.tsv",)
    cfg, _ = parse_toml(tmp_path, 'eval-analogy = ["f.txt"]\n', "--eval-analogy", "a.txt", "--eval-analogy", "b.txt")
    assert cfg.eval_analogy == ("a.txt", "b.txt")
    from mpidwe.evaluate.config import EvaluateConfig
    e = parse_command(EvaluateConfig, ["v.txt", "--analogy", "a.txt", "--analogy", "b.txt"], prog="e", description="")
    assert e.analogy == ("a.txt", "b.txt") and e.similarity == ()
    with pytest.raises(ConfigError, match=r"--eval-analogy names d/a.txt more than once"):
        parse_command(TrainConfig, ["--eval-analogy", "d/a.txt", "--eval-analogy", "d/./a.txt"], prog="t",
                      description="", config_file_flag=True)


def test_train_help_is_grouped_by_topic():
    """244 ungrouped lines before: now sections, each flag under its own, every field in one."""
    import re

    groups = TrainConfig.HELP_GROUPS
    named = [n for names in groups.values() for n in names]
    assert sorted(named) == sorted(f.name for f in dataclasses.fields(TrainConfig)) and len(set(named)) == len(named)
    out = run_py(["-m", "mpidwe.train", "--help"]).stdout
    titles = [t for t in re.findall(r"^(\S[^\n]*):$", out, re.M) if t in groups]
    assert titles == list(groups)
    for title, names in groups.items():
        start = out.index(f"\n{title}:\n")
        section = out[start:out.find("\n\n", start + 2)]
        for name in names:
            assert f"  --{name.replace('_', '-')}" in section, (title, name)


def test_threads_far_beyond_the_cpus_are_refused(monkeypatch):
    """--threads 100000 trained (time-sliced) and a SIGTERM then waited on every thread: more
    than 4 x the node's CPUs is refused in one line; up to that, and 0, are taken."""
    import mpidwe.core.config as config

    monkeypatch.setattr(config.os, "cpu_count", lambda: 8)
    with pytest.raises(ConfigError, match=r"--threads must be <= 32 \(4 x the 8 CPUs of this node\), got 100000"):
        TrainConfig(threads=100000)
    with pytest.raises(ConfigError, match="got 33"):
        TrainConfig(threads=33)
    assert TrainConfig(threads=32).threads == 32 and TrainConfig().threads == 0
