"""Parsers of board output, on every format listed in /work/shared/reference/board-facts.md:
tegrastats (JetPack 4, 5/6, 7), vcgencmd pmic_read_adc, nvpmodel, nv_tegra_release, nvcc."""
from __future__ import annotations

import pytest

from sdk.remote.agent.facts import (jetpack_for_l4t, parse_l4t_release, parse_nvcc_version, parse_nvpmodel_conf,
                                    parse_nvpmodel_query)
from sdk.remote.agent.power.base import total_of
from sdk.remote.agent.power.tegrastats import parse_tegrastats
from sdk.remote.agent.power.vcgencmd import parse_pmic_read_adc

# (line, expected instantaneous mW per rail, expected whole-device mW, label prefix)
TEGRASTATS = [
    # JetPack 4 (L4T R32), no units
    ("RAM 1608/3956MB (lfb 76x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lru 0kB) CPU [8%@1479,3%@1479,off,off] "
     "EMC_FREQ 0%@1600 GR3D_FREQ 0%@921 APE 25 PLL@34C CPU@36.5C PMIC@100C GPU@35C AO@43C thermal@35.75C "
     "POM_5V_IN 933/933 POM_5V_GPU 0/0 POM_5V_CPU 84/105",
     {"POM_5V_IN": 933, "POM_5V_GPU": 0, "POM_5V_CPU": 84}, 933, "module input rail POM_5V_IN"),
    ("RAM 2139/7846MB (lfb 1118x4MB) SWAP 0/3923MB (cached 0MB) CPU [1%@345,off,off,0%@345,1%@345,0%@345] "
     "EMC_FREQ 0% GR3D_FREQ 0% PLL@40C MCPU@40C PMIC@100C Tboard@35C GPU@38C BCPU@40C thermal@39.2C Tdiode@36.75C "
     "VDD_IN 1383/1383 VDD_CPU 153/191 VDD_GPU 76/76 VDD_SOC 384/384 VDD_WIFI 364/335 VDD_DDR 192/201",
     {"VDD_IN": 1383, "VDD_CPU": 153, "VDD_GPU": 76, "VDD_SOC": 384, "VDD_WIFI": 364, "VDD_DDR": 192}, 1383,
     "module input rail VDD_IN"),
    ("RAM 4722/15822MB (lfb 2520x4MB) SWAP 0/7911MB (cached 0MB) CPU [2%@1190,1%@1190,off,off,off,off,off,off] "
     "EMC_FREQ 0% GR3D_FREQ 0% AUX@35C CPU@36.5C thermal@35.85C Tboard@36C AO@35.5C GPU@35.5C Tdiode@38.25C PMIC@100C "
     "GPU 463/463 CPU 618/618 SOC 2936/2936 CV 0/0 VDDRQ 309/309 SYS5V 3306/3306",
     {"GPU": 463, "CPU": 618, "SOC": 2936, "CV": 0, "VDDRQ": 309, "SYS5V": 3306}, 7632, "sum of rails"),
    ("RAM 2525/7772MB (lfb 1x4MB) SWAP 0/3886MB (cached 0MB) CPU [5%@1190,3%@1190,2%@1190,1%@1190,0%@1190,0%@1190] "
     "EMC_FREQ 0% GR3D_FREQ 0% AUX@31C CPU@33C thermal@31.8C AO@30.5C GPU@31C PMIC@100C "
     "VDD_IN 5071/4811 VDD_CPU_GPU_CV 1315/1066 VDD_SOC 1116/1116",
     {"VDD_IN": 5071, "VDD_CPU_GPU_CV": 1315, "VDD_SOC": 1116}, 5071, "module input rail VDD_IN"),
    # JetPack 5 / 6: a leading time stamp, mW units
    ("01-03-2023 16:07:54 RAM 2257/30536MB (lfb 6691x4MB) SWAP 0/15268MB (cached 0MB) "
     "CPU [0%@729,0%@729,0%@729,0%@729,0%@2201,0%@2201,0%@2201,0%@2201,off,off,off,off] EMC_FREQ 0%@2133 "
     "GR3D_FREQ 0%@[0,0] VIC_FREQ 729 APE 174 CV0@-256C CPU@45.875C Tboard@33C SOC2@41.343C Tdiode@35.25C "
     "SOC0@42.437C CV1@-256C GPU@-256C tj@45.875C SOC1@43.531C CV2@-256C "
     "VDD_GPU_SOC 2390mW/2390mW VDD_CPU_CV 796mW/796mW VIN_SYS_5V0 3522mW/3522mW NC 0mW/0mW VDDQ_VDD2_1V8AO 301mW/301mW",
     {"VDD_GPU_SOC": 2390, "VDD_CPU_CV": 796, "VIN_SYS_5V0": 3522, "VDDQ_VDD2_1V8AO": 301}, 7009, "sum of rails"),
    ("09-21-2025 15:38:17 RAM 3645/7620MB (lfb 4x4MB) SWAP 0/3810MB (cached 0MB) "
     "CPU [2%@729,1%@729,0%@729,0%@729,off,off] GR3D_FREQ 0%@[305] cpu@47.5C soc2@46.4C soc0@46.2C gpu@46.5C "
     "tj@47.5C soc1@46.2C VDD_IN 2957mW/2957mW VDD_CPU_GPU_CV 486mW/486mW VDD_SOC 1012mW/1012mW",
     {"VDD_IN": 2957, "VDD_CPU_GPU_CV": 486, "VDD_SOC": 1012}, 2957, "module input rail VDD_IN"),
    # JetPack 7: three values per rail, GR3D_FREQ with two clocks
    ("11-02-2025 10:12:01 RAM 9123/125772MB (lfb 12x4MB) SWAP 0/0MB (cached 0MB) CPU [1%@972,2%@972] "
     "GR3D_FREQ 12%@[1300,1300] cpu@50.1C gpu@48.2C "
     "VDD_GPU_SOC 5139mW/5139mW/5139mW VDD_CPU_CV 3268mW/3268mW/3268mW VIN_SYS_5V0 5500mW/5500mW/5500mW",
     {"VDD_GPU_SOC": 5139, "VDD_CPU_CV": 3268, "VIN_SYS_5V0": 5500}, 13907, "sum of rails"),
]


@pytest.mark.parametrize("line,rails_mw,total_mw,label", TEGRASTATS)
def test_tegrastats_every_dialect(line, rails_mw, total_mw, label):
    rails = parse_tegrastats(line)
    assert rails == {k: pytest.approx(v / 1e3) for k, v in rails_mw.items()}
    total, what = total_of(rails)
    assert total == pytest.approx(total_mw / 1e3)
    assert what.startswith(label)


def test_tegrastats_uses_the_instantaneous_value_not_the_running_average():
    # the second (and third) numbers are the tool's statistics: never used
    assert parse_tegrastats("VDD_IN 5071/4811 VDD_SOC 1116/1200") == {"VDD_IN": 5.071, "VDD_SOC": 1.116}
    assert parse_tegrastats("VDD_IN 2957mW/1000mW") == {"VDD_IN": 2.957}
    assert parse_tegrastats("VDD_GPU_SOC 100mW/5139mW/9000mW") == {"VDD_GPU_SOC": 0.1}


@pytest.mark.parametrize("line", [
    # the facts file's literal excerpts, with its "..." elisions
    "POM_5V_IN 933/933 POM_5V_GPU 0/0 POM_5V_CPU 84/105",
    "01-03-2023 16:07:54 RAM 2257/30536MB ... VDD_GPU_SOC 2390mW/2390mW VDD_CPU_CV 796mW/796mW",
    "... GPU 463/463 CPU 618/618 SOC 2936/2936 CV 0/0 VDDRQ 309/309 SYS5V 3306/3306",
])
def test_tegrastats_literal_excerpts(line):
    rails = parse_tegrastats(line)
    assert rails and "RAM" not in rails and all(v >= 0 for v in rails.values())


def test_tegrastats_line_without_power_fields():
    assert parse_tegrastats("RAM 2257/30536MB (lfb 6691x4MB) SWAP 0/15268MB (cached 0MB) IRAM 0/252kB(lru 0kB)") == {}
    assert parse_tegrastats("") == {}


PMIC = """\
 VDD_CORE_A current(7)=10.87674000A
 3V3_SYS_A current(1)=0.05465400A
 1V8_SYS_A current(2)=0.17470000A
 DDR_VDD2_A current(3)=0.01464000A
 EXT5V_V volt(24)=5.15186000V
 BATT_V volt(25)=0.00683500V
 3V3_SYS_V volt(9)=3.30632200V
 1V8_SYS_V volt(10)=1.80036000V
 DDR_VDD2_V volt(11)=1.11071800V
 VDD_CORE_V volt(15)=0.87891400V
"""


def test_pmic_read_adc_pairs_current_and_voltage_by_rail_name():
    rails = parse_pmic_read_adc(PMIC)
    assert set(rails) == {"VDD_CORE", "3V3_SYS", "1V8_SYS", "DDR_VDD2"}  # EXT5V/BATT: voltage only
    assert rails["VDD_CORE"] == pytest.approx(10.87674 * 0.878914)
    assert rails["3V3_SYS"] == pytest.approx(0.054654 * 3.306322)
    # the bracketed channel numbers do not correspond: pairing is by name only
    assert rails["DDR_VDD2"] == pytest.approx(0.01464 * 1.110718)


def test_nv_tegra_release_and_jetpack():
    line = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023"
    assert parse_l4t_release(line) == "35.4.1"
    assert parse_l4t_release("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref") == "32.7.1"
    assert parse_l4t_release("# R36 (release), REVISION: 4.3, GCID: 38968081") == "36.4.3"
    assert parse_l4t_release("garbage") is None
    assert jetpack_for_l4t("35.4.1") == "5.1.2"
    assert jetpack_for_l4t("32.7.1") == "4.6.1"
    assert jetpack_for_l4t("32.7.9") == "4.6.x"  # unknown point release: the line, not a guess
    assert jetpack_for_l4t("36.4.3") == "6.2"
    assert jetpack_for_l4t("36.4.0") == "6.1"
    assert jetpack_for_l4t(None) is None


def test_nvpmodel_query_and_conf():
    assert parse_nvpmodel_query("NV Power Mode: MAXN\n0\n") == {"name": "MAXN", "id": 0}
    assert parse_nvpmodel_query("NVPM WARN: fan mode is not set!\nNV Power Mode: 15W\n2\n") == {"name": "15W", "id": 2}
    assert parse_nvpmodel_query("nothing") is None
    names, default = parse_nvpmodel_conf("< POWER_MODEL ID=0 NAME=MAXN >\nx\n< POWER_MODEL ID=2 NAME=10W >\n< PM_CONFIG DEFAULT=2 >")
    assert names == {0: "MAXN", 2: "10W"} and default == 2


def test_nvcc_version():
    text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.2, V12.2.140\nBuild cuda_12.2.r12.2"
    assert parse_nvcc_version(text) == "12.2.140"
    assert parse_nvcc_version("Cuda compilation tools, release 10.2") == "10.2"
