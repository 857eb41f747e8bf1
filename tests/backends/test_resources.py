import pytest

from shipyard.backends import resources
from shipyard.backends.resources import InstanceResources, MachineResources, detect, plan_instances
from shipyard.errors import CapacityError, ValidationError
from shipyard.spec.catalog import InstanceType

CPU_BOX = MachineResources(vcpus=16, memory_gib=64.0, gpus=())
GPU_BOX = MachineResources(vcpus=32, memory_gib=256.0, gpus=("0", "1", "2", "3"))

LOCAL = InstanceType(name="local", vcpus=None, memory_gib=None, gpus=0)
LOCAL_GPU = InstanceType(name="local_gpu", vcpus=None, memory_gib=None, gpus=None)
M5_2XL = InstanceType(name="ml.m5.2xlarge", vcpus=8, memory_gib=32, gpus=0)
M5_4XL = InstanceType(name="ml.m5.4xlarge", vcpus=16, memory_gib=64, gpus=0)
ONE_GPU = InstanceType(name="ml.g5.xlarge", vcpus=4, memory_gib=16, gpus=1, gpu_memory_gib=24)
TWO_GPU = InstanceType(name="two.gpu", vcpus=8, memory_gib=32, gpus=2)


def test_local_shares_the_whole_machine_with_every_instance():
    plan = plan_instances([(LOCAL, 3)], CPU_BOX, oversubscribe=False)
    assert plan == [InstanceResources(vcpus=16, memory_gib=None, gpus=())] * 3


def test_local_gets_no_gpus_even_on_a_gpu_machine():
    assert all(inst.gpus == () for inst in plan_instances([(LOCAL, 2)], GPU_BOX, oversubscribe=False))


def test_local_gpu_splits_gpus_evenly_and_disjointly():
    plan = plan_instances([(LOCAL_GPU, 2)], GPU_BOX, oversubscribe=False)
    assert [inst.gpus for inst in plan] == [("0", "1"), ("2", "3")]
    three = plan_instances([(LOCAL_GPU, 3)], GPU_BOX, oversubscribe=False)
    assert [inst.gpus for inst in three] == [("0",), ("1",), ("2",)]  # even split; the 4th stays idle


def test_local_gpu_on_a_machine_without_gpus_is_a_capacity_error():
    with pytest.raises(CapacityError, match="no(ne)? GPU|has none"):
        plan_instances([(LOCAL_GPU, 1)], CPU_BOX, oversubscribe=True)


def test_local_gpu_with_more_instances_than_gpus_is_a_capacity_error():
    with pytest.raises(CapacityError, match="4"):
        plan_instances([(LOCAL_GPU, 5)], GPU_BOX, oversubscribe=True)


def test_sized_instances_that_fit_get_their_size():
    plan = plan_instances([(M5_2XL, 2)], CPU_BOX, oversubscribe=False)
    assert plan == [InstanceResources(vcpus=8, memory_gib=32, gpus=())] * 2


def test_too_many_vcpus_needs_oversubscribe():
    with pytest.raises(CapacityError) as info:
        plan_instances([(M5_4XL, 2)], CPU_BOX, oversubscribe=False)
    message = str(info.value)
    assert "32 vCPUs" in message and "16" in message
    assert "128 GiB" in message  # memory is short too, and both are said at once
    assert "oversubscribe" in message


def test_oversubscribe_allows_cpu_and_memory_but_caps_at_the_machine():
    plan = plan_instances([(M5_4XL, 3)], CPU_BOX, oversubscribe=True)
    assert len(plan) == 3
    small = MachineResources(vcpus=4, memory_gib=16.0, gpus=())
    assert plan_instances([(M5_4XL, 1)], small, oversubscribe=True) == [
        InstanceResources(vcpus=4, memory_gib=16.0, gpus=())
    ]


def test_memory_alone_can_be_short():
    roomy_cpus = MachineResources(vcpus=64, memory_gib=40.0, gpus=())
    with pytest.raises(CapacityError, match="64 GiB memory") as info:
        plan_instances([(M5_2XL, 2)], roomy_cpus, oversubscribe=False)
    assert "vCPUs" not in str(info.value)


def test_memtotal_a_little_under_nominal_still_fits():
    machine = MachineResources(vcpus=8, memory_gib=31.3, gpus=())  # a "32 GiB" machine
    assert len(plan_instances([(M5_2XL, 1)], machine, oversubscribe=False)) == 1


def test_gpu_types_get_disjoint_gpus():
    plan = plan_instances([(ONE_GPU, 3)], GPU_BOX, oversubscribe=False)
    assert [inst.gpus for inst in plan] == [("0",), ("1",), ("2",)]
    plan = plan_instances([(TWO_GPU, 2)], GPU_BOX, oversubscribe=False)
    assert [inst.gpus for inst in plan] == [("0", "1"), ("2", "3")]
    all_gpus = [g for inst in plan for g in inst.gpus]
    assert len(all_gpus) == len(set(all_gpus))


@pytest.mark.parametrize("oversubscribe", [False, True])
def test_gpus_can_never_be_oversubscribed(oversubscribe):
    with pytest.raises(CapacityError, match="6 GPUs.*4.*cannot be oversubscribed"):
        plan_instances([(TWO_GPU, 3)], GPU_BOX, oversubscribe=oversubscribe)
    with pytest.raises(CapacityError, match="GPU"):
        plan_instances([(ONE_GPU, 1)], CPU_BOX, oversubscribe=oversubscribe)


def test_count_must_be_positive():
    with pytest.raises(ValidationError):
        plan_instances([(LOCAL, 0)], CPU_BOX, oversubscribe=False)


def test_plan_for_every_catalog_type_on_a_big_machine():
    from shipyard.spec.catalog import load_catalog

    big = MachineResources(vcpus=256, memory_gib=4096.0, gpus=tuple(str(i) for i in range(8)))
    for it in load_catalog().values():
        plan = plan_instances([(it, 1)], big, oversubscribe=False)
        assert len(plan) == 1 and plan[0].vcpus >= 1


def test_detect_describes_this_machine():
    machine = detect()
    assert machine.vcpus >= 1 and machine.memory_gib > 0.1
    assert all(isinstance(g, str) for g in machine.gpus)


def test_detect_without_nvidia_smi_has_no_gpus(monkeypatch):
    monkeypatch.setattr(resources.shutil, "which", lambda name: None)
    assert detect().gpus == ()


def test_gpu_query_uses_an_argument_list_and_honours_cuda_visible_devices(monkeypatch):
    calls = []

    def fake_run(args, **kwargs):
        calls.append((args, kwargs))

        class Done:
            stdout = "0\n1\n2\n3\n"

        return Done()

    monkeypatch.setattr(resources.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(resources.subprocess, "run", fake_run)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect().gpus == ("0", "1", "2", "3")
    args, kwargs = calls[0]
    assert isinstance(args, list) and not kwargs.get("shell") and kwargs.get("timeout")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert detect().gpus == ("2", "3")


def test_a_hung_nvidia_smi_means_no_gpus(monkeypatch):
    def hung(args, **kwargs):
        raise resources.subprocess.TimeoutExpired(args, kwargs.get("timeout"))

    monkeypatch.setattr(resources.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(resources.subprocess, "run", hung)
    assert detect().gpus == ()


def test_groups_split_one_machine_cpu_group_and_gpu_group():
    """A heterogeneous job's groups side by side: the GPU groups get disjoint GPUs, in group order, a
    whole-machine GPU type sharing what the sized ones leave; CPU and memory are counted over all."""
    plan = plan_instances([(M5_2XL, 2), (ONE_GPU, 2)], GPU_BOX, oversubscribe=False)
    assert [(i.vcpus, i.gpus) for i in plan] == [(8, ()), (8, ()), (4, ("0",)), (4, ("1",))]
    mixed = plan_instances([(ONE_GPU, 1), (LOCAL_GPU, 1), (LOCAL, 1)], GPU_BOX, oversubscribe=False)
    assert [i.gpus for i in mixed] == [("0",), ("1", "2", "3"), ()]
    with pytest.raises(CapacityError, match=r"1 x ml.m5.4xlarge \+ 2 x ml.m5.2xlarge needs 32 vCPUs"):
        plan_instances([(M5_4XL, 1), (M5_2XL, 2)], CPU_BOX, oversubscribe=False)
    with pytest.raises(CapacityError, match="needs 6 GPUs"):
        plan_instances([(TWO_GPU, 2), (TWO_GPU, 1)], GPU_BOX, oversubscribe=False)
    with pytest.raises(CapacityError, match="needs GPUs and this machine has none"):
        plan_instances([(LOCAL, 1), (LOCAL_GPU, 1)], CPU_BOX, oversubscribe=False)
