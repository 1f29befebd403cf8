"""An unknown FUSER_* name in another case than fuser's (FUSER_cpu_kernels) is warned about with
the known name it stands for (dump.py `warn_unknown_settings`): difflib compares case-sensitively,
so a lower-case name matched nothing and the warning listed every setting instead."""
import pytest

from fuser.dump import warn_unknown_settings


@pytest.mark.parametrize("name, closest", [("FUSER_cpu_kernels", "FUSER_CPU_KERNELS"), ("FUSER_Dump", "FUSER_DUMP"),
                                           ("FUSER_autotuen", "FUSER_AUTOTUNE")])
def test_a_setting_in_another_case_is_warned_about_with_the_known_name(name, closest):
    with pytest.warns(UserWarning, match=rf"fuser: {name}='s66' is no fuser setting and is ignored; "
                                         rf"did you mean {closest}\?"):
        warn_unknown_settings({name: "s66", "PATH": "/bin"})
