from pathlib import Path

import pydantic
import pytest

from shipyard.errors import ValidationError
from shipyard.spec.catalog import InstanceType, get_instance_type, load_catalog


@pytest.fixture(autouse=True)
def empty_home(tmp_path, monkeypatch):
    """Every test gets its own SHIPYARD_HOME so a developer's ~/.shipyard cannot leak in."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SHIPYARD_HOME", str(home))
    return home


def test_packaged_catalog_has_local_and_ml_types():
    catalog = load_catalog()
    local, local_gpu = catalog["local"], catalog["local_gpu"]
    assert (local.vcpus, local.memory_gib, local.gpus, local.on_demand_usd_per_hour) == (None, None, 0, 0)
    assert local_gpu.gpus is None
    p4d = catalog["ml.p4d.24xlarge"]
    assert (p4d.vcpus, p4d.gpus, p4d.gpu_memory_gib) == (96, 8, 40)
    for name in ("ml.m5.large", "ml.c5.4xlarge", "ml.g5.12xlarge", "ml.p3.2xlarge", "ml.p5.48xlarge"):
        assert catalog[name].name == name


def test_every_ml_type_is_sized_priced_and_spot_is_cheaper():
    for name, it in load_catalog().items():
        if not name.startswith("ml."):
            continue
        assert it.vcpus and it.memory_gib and it.gpus is not None, name
        assert 0 < it.spot_usd_per_hour < it.on_demand_usd_per_hour, name
        assert (it.gpu_memory_gib is not None) == (it.gpus > 0), name


def test_instance_type_is_frozen_and_strict():
    it = get_instance_type("ml.m5.large")
    with pytest.raises(pydantic.ValidationError):
        it.vcpus = 64
    with pytest.raises(pydantic.ValidationError):
        InstanceType(name="x", vcpus=1, memory_gib=1, gpus=0, gpu=1)  # misspelled field


def test_misspelled_name_suggests_the_closest():
    with pytest.raises(ValidationError) as info:
        get_instance_type("ml.m5.xlarg")
    assert info.value.field == "instance_type"
    assert "did you mean 'ml.m5.xlarge'" in str(info.value)


def test_nonsense_name_lists_the_valid_ones():
    with pytest.raises(ValidationError, match="use one of .*ml.p3.2xlarge"):
        get_instance_type("zzzzzzzzzzzzzzzzzzzzzzzz")


def test_user_file_in_shipyard_home_overrides_fields_and_adds_types(empty_home):
    (empty_home / "instance_types.yaml").write_text(
        "ml.m5.large:\n  on_demand_usd_per_hour: 0.5\n"
        "my.box:\n  vcpus: 64\n  memory_gib: 256\n  gpus: 2\n  gpu_memory_gib: 48\n"
    )
    catalog = load_catalog()
    m5 = catalog["ml.m5.large"]
    assert m5.on_demand_usd_per_hour == 0.5
    assert (m5.vcpus, m5.memory_gib) == (2, 8)  # untouched fields keep the packaged values
    assert catalog["my.box"] == InstanceType(name="my.box", vcpus=64, memory_gib=256, gpus=2, gpu_memory_gib=48)
    assert get_instance_type("my.box").gpus == 2


def test_without_a_user_file_the_packaged_prices_stand(empty_home):
    assert not (empty_home / "instance_types.yaml").exists()
    assert load_catalog()["ml.m5.large"].on_demand_usd_per_hour == pytest.approx(0.115, rel=0.5)


def test_malformed_user_entry_names_file_and_entry(empty_home):
    path = empty_home / "instance_types.yaml"
    path.write_text("ml.m5.large:\n  vcpus: many\n")
    with pytest.raises(ValidationError) as info:
        load_catalog()
    message = str(info.value)
    assert str(path) in message and "ml.m5.large" in message and "vcpus" in message


def test_new_user_entry_missing_a_required_field_is_an_error(empty_home):
    (empty_home / "instance_types.yaml").write_text("my.box:\n  vcpus: 4\n")
    with pytest.raises(ValidationError, match="my.box.*memory_gib"):
        load_catalog()


def test_unknown_field_in_user_file_is_an_error(empty_home):
    (empty_home / "instance_types.yaml").write_text("ml.m5.large:\n  price: 1\n")
    with pytest.raises(ValidationError, match="price"):
        load_catalog()


@pytest.mark.parametrize("text", ["[1, 2]\n", "a: [unclosed\n", "ml.m5.large: 3\n"])
def test_user_file_of_the_wrong_shape_is_an_error(empty_home, text):
    path = empty_home / "instance_types.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError, match=str(path)):
        load_catalog()


def test_extra_path_is_used_and_must_exist(tmp_path):
    extra = tmp_path / "mine.yaml"
    extra.write_text("local:\n  on_demand_usd_per_hour: 1.25\n")
    assert load_catalog(extra)["local"].on_demand_usd_per_hour == 1.25
    with pytest.raises(ValidationError, match="no such file"):
        load_catalog(Path(tmp_path / "missing.yaml"))


def test_shipyard_home_defaults_to_dot_shipyard_in_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SHIPYARD_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".shipyard").mkdir()
    (tmp_path / ".shipyard" / "instance_types.yaml").write_text("local:\n  spot_usd_per_hour: 0.01\n")
    assert load_catalog()["local"].spot_usd_per_hour == 0.01
