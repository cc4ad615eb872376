"""The support matrix: one row per Neuron SDK release from 2.26.1, each citing where it was read.

Package versions are public versions (local ``+hash`` labels dropped). ``SOURCES``
(``support_sources.py``) names every source once; rows and images cite them by key. Where
sources disagree the newest one wins, and the row's ``note`` says so. ``support.py`` holds the
types and the queries; docs/backends.md and docs/deploy.md carry the tables
``scripts/gen_support_matrix.py`` writes from this module.
"""

from __future__ import annotations

from neuronc.backends.support_sources import SOURCES
from neuronc.backends.support_types import BackendSupport, Image, Release, Serves, Status


def _nxdi_image(
    sdk: str, vllm: str, plugin: str, cc: str, nxdi: str, nxd: str, *off_release: str, **more: str
) -> Image:
    py = "py311" if vllm == "0.9.1" else "py312"
    ubuntu = "22.04" if vllm == "0.9.1" else "24.04"
    serves = Serves.VLLM_V0 if vllm == "0.9.1" else Serves.NXDI
    targets = ("inf2", "trn1", "trn2") if vllm == "0.9.1" else ("inf2", "trn1", "trn2", "trn3")
    source = "DLC@6d82485" if (sdk, vllm) == ("2.27.1", "0.13.0") else f"DLC@{sdk}"
    return Image(
        "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx",
        f"{vllm}-neuronx-{py}-sdk{sdk}-ubuntu{ubuntu}",
        serves,
        targets,
        {
            "neuronx-cc": cc,
            "neuronx-distributed-inference": nxdi,
            "neuronx-distributed": nxd,
            **({"vllm-neuron": plugin} if serves is Serves.NXDI else {}),
            **more,
        },
        (source,),
        vllm=vllm,
        plugin=plugin if serves is Serves.NXDI else None,
        python=py.removeprefix("py")[0] + "." + py.removeprefix("py")[1:],
        note="AWS's private vLLM V0 fork (vLLM 0.9.1), not the vllm-neuron plugin" if vllm == "0.9.1" else "",
        off_release=off_release,
    )


# The exact Python of the vllm-neuron images whose Dockerfile was read (ARG PYTHON_VERSION, DLC-ENV).
DLC_PYTHON = {"0.21.0.1.0.0": "3.13.13", "0.24.0.1.1.0": "3.13.13"}


def _plugin_image(sdk: str, plugin: str, vllm: str, py: str, ubuntu: str, packages: dict[str, str]) -> Image:
    """A vllm-neuron image: ``packages`` is what its Dockerfile pins (neuronx-cc, NKI, libtorch-neuronx-lite:
    ``support.PINNED``); vllm-neuron (a git branch) and vLLM (its dependency) are recorded, never pinned.
    Its own ENV and exact Python where its Dockerfile was read (DLC-ENV); 2.33.0's was not (docs only)."""
    read = sdk != "2.33.0"
    return Image(
        "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx",
        f"{plugin}-neuronx-py{py}-sdk{sdk}-ubuntu{ubuntu}",
        Serves.VLLM_NEURON,
        ("trn2", "trn3"),
        {"vllm-neuron": plugin, "vllm": vllm, **packages},
        (f"DLC@{sdk}", "DLC-ENV") if read else ("DOCS@2.33.0",),
        vllm=vllm,
        plugin=plugin,
        python=py[0] + "." + py[1:],
        env={} if read else None,
        python_version=DLC_PYTHON.get(plugin),
    )


def _pytorch_image(sdk: str, torch: str, py: str = "312", ubuntu: str = "24.04") -> Image:
    return Image(
        "public.ecr.aws/neuron/pytorch-inference-neuronx",
        f"{torch}-neuronx-py{py}-sdk{sdk}-ubuntu{ubuntu}",
        Serves.PYTORCH,
        ("inf2", "trn1", "trn2", "trn3") if sdk != "2.26.1" else ("inf2", "trn1", "trn2"),
        {},
        (f"DLC@{sdk}",),
        python=py[0] + "." + py[1:],
    )


ALL = ("inf2", "trn1", "trn2", "trn3")
NXDI_INF2_TRN1_NOTE = (
    "Inf2/Trn1: the 2.29 release notes say NxD Inference models run on Trn2 and newer only (RN-NXDI-2.29), "
    "while the manifest and the DLC README still list inf2/trn1; the newest source (EOS-NXDI, 2026-10-16) keeps "
    "Inf2/Trn1 in maintenance at 2.31, which this table follows"
)
# Why NxD Inference of 2.29-2.31 on Inf2/Trn1 is used only when a profile's sdk: names it (the default is 2.28).
NXDI_INF2_TRN1_NAMED = (
    "2.29.0's breaking change says NxD Inference models run on Trn2 and newer only and asks Trn1/Inf2 users to "
    "pin 2.28 (RN-NXDI-2.29); the 2026-10-16 announcement keeps Inf2/Trn1 in maintenance at 2.31 (EOS-NXDI)"
)


def _nxdi(status: Status = Status.SUPPORTED, note: str = "", *sources: str, named: bool = False) -> BackendSupport:
    """NxD Inference on every target; from 2.29 Inf2/Trn1 only when sdk: names the release."""
    named_only = dict.fromkeys(("inf2", "trn1"), NXDI_INF2_TRN1_NAMED) if named else {}
    extra = ("RN-NXDI-2.29", "EOS-NXDI") if named else ()
    return BackendSupport(ALL, status, note, tuple(dict.fromkeys((*sources, *extra))), named_only)


# Trn3 for NxD Inference and torch-neuronx from 2.27.0, one rule for both: the release notes (RN@2.27.0).
TRN3_FROM_RELEASE_NOTES = ("RN@2.27.0",)


def _torch_neuronx(targets: tuple[str, ...], status: Status = Status.SUPPORTED, note: str = "") -> BackendSupport:
    return BackendSupport(targets, status, note, TRN3_FROM_RELEASE_NOTES if "trn3" in targets else ())


def _tnx(version: str) -> dict[str, str]:
    """The torch-neuronx an NxDI image pins (NEURONX_FRAMEWORK_VERSION): its model.pt is traced with it."""
    return {"torch-neuronx": version}


VLLM_NEURON_LNC = (
    "the plugin's neuronx-cc command passes no --lnc and its docs never name LNC: no source supports LNC 1 "
    "(VLLM-NEURON-LNC)"
)
VLLM_NEURON_NATIVE = (
    "2.33's default native compile route has no documented CPU compile or cache layout: a CPU compile on it is "
    "unverified (VLLM-NEURON-ROUTE); 2.32.0 is the newest release whose compile route and cache layout are "
    "documented"
)
VLLM_NEURON = BackendSupport(
    ("trn2", "trn3"),
    Status.BETA,
    "the vllm-neuron plugin's torch.compile path (libtorch-neuronx-lite, no NxD Inference); Trn2/Trn3 only",
    ("VLLM-NEURON-LNC",),
    lnc=(2,),
    lnc_note=VLLM_NEURON_LNC,
)
VLLM_NEURON_2_33 = BackendSupport(
    ("trn2", "trn3"),
    Status.BETA,
    "the native route (default) or the deprecated XLA route; CPU compile on the native route unverified",
    ("VLLM-NEURON-LNC", "VLLM-NEURON-ROUTE"),
    dict.fromkeys(("trn2", "trn3"), VLLM_NEURON_NATIVE),
    lnc=(2,),
    lnc_note=VLLM_NEURON_LNC,
)

_2_27_PACKAGES = {
    "neuronx-cc": ("2.22.12471.0",),
    "neuronx-distributed": ("0.16.25997",),
    "torch-neuronx": ("2.9.0.2.11.19912", "2.8.0.2.11.19912", "2.7.0.2.11.19912"),
    "nki": ("0.1.0",),
}
_2_28_PACKAGES = {
    "neuronx-cc": ("2.23.6484.0",),
    "neuronx-distributed-inference": ("0.8.16251",),
    "neuronx-distributed": ("0.17.26814",),
    "torch-neuronx": ("2.9.0.2.12.22436", "2.8.0.2.12.22436", "2.7.0.2.12.22436"),
    "nki": ("0.2.0",),
    "vllm-neuron": ("0.4.1",),
    "vllm": ("0.13.0",),
}
_2_31_PACKAGES = {
    "neuronx-cc": ("2.26.6360.0",),
    "neuronx-distributed-inference": ("0.10.18399",),
    "neuronx-distributed": ("0.19.28492",),
    "torch-neuronx": ("2.9.0.2.15.32035",),
    "libtorch-neuronx-lite": ("2.12.0.1.0.696", "2.11.0.1.0.696", "2.10.0.1.0.696"),
    "nki": ("0.5.0",),
    "vllm-neuron": ("0.21.0.1.0.0", "0.5.3"),
    "vllm": ("0.21.0", "0.16.0"),
}
# What the vllm-neuron DLCs pin (their Dockerfiles' ARG lines); no image pins torch (vLLM brings it).
_2_31_LITE = {"neuronx-cc": "2.26.6360.0", "nki": "0.5.0", "libtorch-neuronx-lite": "2.11.0.1.0.696"}
_2_31_NXDI = {"cc": "2.26.6360.0", "nxdi": "0.10.18399", "nxd": "0.19.28492", "nki": "0.5.0"}
_2_32_IMAGE = {"neuronx-cc": "2.27.5334.0", "nki": "0.6.0", "libtorch-neuronx-lite": "2.11.0.1.0.1284"}
_2_33_PACKAGES = {
    "neuronx-cc": ("2.28.7631.0",),
    "torch-neuronx": ("2.9.0.2.15.32035",),  # the XLA build, still listed (DOCS@2.33.0-torch)
    "nki": ("0.7.0",),
    "vllm-neuron": ("0.29.0.1.2.0",),
    "vllm": ("0.29.0",),
}
# No source names the libtorch-neuronx-lite the 2.33.0 image pins, nor any torch: only these two are known.
_2_33_IMAGE = {"neuronx-cc": "2.28.7631.0", "nki": "0.7.0"}
_2_33_TORCHNEURON = ("2.14.3.0", "2.13.3.0")
_2_33_1_LITE = ("2.13.0.1.0.4089", "2.12.0.1.0.4089", "2.11.0.1.0.4089")


def _2_31_images(sdk: str) -> tuple[Image, ...]:
    """2.31.0 and 2.31.1 ship the same packages: the plugin's first torch.compile image, the last NxDI one."""
    v = _2_31_NXDI
    return (
        _plugin_image(sdk, "0.21.0.1.0.0", "0.21.0", "313", "24.04", _2_31_LITE),
        _nxdi_image(sdk, "0.16.0", "0.5.3", v["cc"], v["nxdi"], v["nxd"], nki=v["nki"], **_tnx("2.9.0.2.15.32035")),
        _pytorch_image(sdk, "2.9.0"),
    )


def _2_31_backends(nxdi_source: str) -> dict[str, BackendSupport]:
    return {
        "nxdi": _nxdi(Status.MAINTENANCE, "the last NxD Inference; " + NXDI_INF2_TRN1_NOTE, nxdi_source, named=True),
        "torch-neuronx": _torch_neuronx(ALL, Status.MAINTENANCE, "the last XLA torch-neuronx (MAINT-XLA)"),
        "vllm-neuron": VLLM_NEURON,
    }


RELEASES: tuple[Release, ...] = (
    Release(
        "2.26.1",
        "2025-10-29",
        {
            "neuronx-cc": ("2.21.33363.0",),
            "neuronx-distributed-inference": ("0.6.10598",),
            "neuronx-distributed": ("0.15.22404",),
            "torch-neuronx": ("2.8.0.2.10.16998", "2.7.0.2.10.16998", "2.6.0.2.10.16998"),
            "transformers-neuronx": ("0.13.1315",),
            "optimum-neuron": ("0.4.5", "0.4.4", "0.4.3"),
        },
        {
            "nxdi": BackendSupport(("inf2", "trn1", "trn2")),
            "transformers-neuronx": BackendSupport(
                ("inf2", "trn1"), Status.LAST, "end of support starts", ("EOS-TNX",)
            ),
            "torch-neuronx": _torch_neuronx(("inf2", "trn1", "trn2")),
            "optimum-neuron": BackendSupport(
                ("inf2", "trn1", "trn2"), note="optimum-neuron 0.4.3-0.4.5", sources=("OPT@0.4.5",)
            ),
        },
        ("MAN@2.26.1", "DLC@2.26.1", "EOS-TNX", "OPT@0.4.5"),
        (
            _nxdi_image("2.26.1", "0.9.1", "", "2.21.33363.0", "0.6.10598", "0.15.22404", **_tnx("2.8.0.2.10.16998")),
            _pytorch_image("2.26.1", "2.8.0", "311", "22.04"),
        ),
    ),
    Release(
        "2.27.0",
        "2025-12-19",
        {
            **_2_27_PACKAGES,
            "neuronx-distributed-inference": ("0.7.14366",),
            "vllm-neuron": ("0.2.1",),
            "vllm": ("0.11.0",),
        },
        {"nxdi": _nxdi(Status.SUPPORTED, "", *TRN3_FROM_RELEASE_NOTES), "torch-neuronx": _torch_neuronx(ALL)},
        ("MAN@2.27.0", "DLC@2.27.0", "RN@2.27.0"),
        (
            _nxdi_image(
                "2.27.0",
                "0.11.0",
                "0.2.1",
                "2.22.12471.0",
                "0.7.14366",
                "0.16.25997",
                "torch-neuronx",
                **_tnx("2.8.0.2.10.16998"),
            ),
            _pytorch_image("2.27.0", "2.9.0"),
        ),
        note="Trn3 for NxD Inference and torch-neuronx (the release notes, RN@2.27.0; the manifests list trn3 "
        "for no package until 2.29.0); the vLLM 0.11.0 image pins torch-neuronx 2.8.0.2.10.16998, 2.26.1's "
        "build, not one of 2.27.0's (DLC@2.27.0)",
    ),
    Release(
        "2.27.1",
        "2026-01-14",
        {
            **_2_27_PACKAGES,
            "neuronx-distributed-inference": ("0.7.15063",),
            "vllm-neuron": ("0.2.2", "0.3.0"),
            "vllm": ("0.11.0", "0.13.0"),
        },
        {"nxdi": _nxdi(Status.SUPPORTED, "", *TRN3_FROM_RELEASE_NOTES), "torch-neuronx": _torch_neuronx(ALL)},
        ("MAN@2.27.1", "DLC@2.27.1", "DLC@6d82485", "RN@2.27.0"),
        (
            # The two images ship different torch-neuronx builds (their Dockerfiles' NEURONX_FRAMEWORK_VERSION).
            _nxdi_image(
                "2.27.1",
                "0.13.0",
                "0.3.0",
                "2.22.12471.0",
                "0.7.15063",
                "0.16.25997",
                nki="0.1.0",
                **{"torch-neuronx": "2.9.0.2.11.19912"},
            ),
            _nxdi_image(
                "2.27.1",
                "0.11.0",
                "0.2.2",
                "2.22.12471.0",
                "0.7.15063",
                "0.16.25997",
                **{"torch-neuronx": "2.8.0.2.11.19912"},
            ),
            _pytorch_image("2.27.1", "2.9.0"),
        ),
        note="the vLLM 0.13.0 image (vllm-neuron 0.3.0) was published out of band on 2026-01-26",
    ),
    Release(
        "2.28.0",
        "2026-02-26",
        _2_28_PACKAGES,
        {"nxdi": _nxdi(Status.SUPPORTED, "", *TRN3_FROM_RELEASE_NOTES), "torch-neuronx": _torch_neuronx(ALL)},
        ("MAN@2.28.0", "DLC@2.28.0", "RN@2.27.0"),
        (
            _nxdi_image(
                "2.28.0",
                "0.13.0",
                "0.4.1",
                "2.23.6484.0",
                "0.8.16251",
                "0.17.26814",
                nki="0.2.0",
                **_tnx("2.9.0.2.12.22436"),
            ),
            _pytorch_image("2.28.0", "2.9.0"),
        ),
    ),
    Release(
        "2.28.1",
        "2026-03-13",
        _2_28_PACKAGES,
        {"nxdi": _nxdi(Status.SUPPORTED, "", *TRN3_FROM_RELEASE_NOTES), "torch-neuronx": _torch_neuronx(ALL)},
        ("MAN@HEAD-2.28.1", "RN@2.27.0"),
        note="driver and custom-op fixes only: the 2.28.0 packages, no new images",
    ),
    Release(
        "2.29.0",
        "2026-04-09",
        {
            "neuronx-cc": ("2.24.5133.0",),
            "neuronx-distributed-inference": ("0.9.17334",),
            "neuronx-distributed": ("0.18.27753",),
            "torch-neuronx": ("2.9.0.2.13.24727",),
            "nki": ("0.3.0",),
            "vllm-neuron": ("0.5.0",),
            "vllm": ("0.16.0",),
        },
        {"nxdi": _nxdi(note=NXDI_INF2_TRN1_NOTE, named=True), "torch-neuronx": _torch_neuronx(ALL)},
        ("MAN@2.29.0", "DLC@2.29.0", "RN-NXDI-2.29", "EOS-NXDI"),
        (
            _nxdi_image(
                "2.29.0",
                "0.16.0",
                "0.5.0",
                "2.24.5133.0",
                "0.9.17334",
                "0.18.27753",
                nki="0.3.0",
                **_tnx("2.9.0.2.13.24727"),
            ),
            _pytorch_image("2.29.0", "2.9.0"),
        ),
    ),
    Release(
        "2.29.1",
        "2026-05-01",
        {
            "neuronx-cc": ("2.24.8799.0",),
            "neuronx-distributed-inference": ("0.9.17334",),
            "neuronx-distributed": ("0.18.27753",),
            "torch-neuronx": ("2.9.0.2.13.26312",),
            "nki": ("0.3.0",),
            "vllm-neuron": ("0.5.0",),
            "vllm": ("0.16.0",),
        },
        {"nxdi": _nxdi(note=NXDI_INF2_TRN1_NOTE, named=True), "torch-neuronx": _torch_neuronx(ALL)},
        ("MAN@2.29.1", "DLC@2.29.1", "EOS-NXDI"),
        (
            _nxdi_image(
                "2.29.1",
                "0.16.0",
                "0.5.0",
                "2.24.8799.0",
                "0.9.17334",
                "0.18.27753",
                nki="0.3.0",
                **_tnx("2.9.0.2.13.26312"),
            ),
            _pytorch_image("2.29.1", "2.9.0"),
        ),
    ),
    Release(
        "2.30.0",
        "2026-05-21",
        {
            "neuronx-cc": ("2.25.3371.0",),
            "neuronx-distributed-inference": ("0.10.17970",),
            "neuronx-distributed": ("0.19.28093",),
            "torch-neuronx": ("2.9.0.2.14.27725",),
            "libtorch-neuronx-lite": ("2.10.0.1.0.239",),
            "nki": ("0.4.0",),
            "vllm-neuron": ("0.5.1",),
            "vllm": ("0.16.0",),
        },
        {
            "nxdi": _nxdi(Status.MAINTENANCE, NXDI_INF2_TRN1_NOTE, "MAINT-NXDI-2.30", named=True),
            "torch-neuronx": _torch_neuronx(ALL),
        },
        ("MAN@2.30.0", "DLC@2.30.0", "MAINT-NXDI-2.30", "EOS-NXDI"),
        (
            _nxdi_image(
                "2.30.0",
                "0.16.0",
                "0.5.1",
                "2.25.3371.0",
                "0.10.17970",
                "0.19.28093",
                nki="0.4.0",
                **_tnx("2.9.0.2.14.27725"),
            ),
            _pytorch_image("2.30.0", "2.9.0"),
        ),
        note="libtorch-neuronx-lite appears; no vllm-neuron release uses it yet",
    ),
    Release(
        "2.31.0",
        "2026-07-07",
        _2_31_PACKAGES,
        _2_31_backends("MAINT-NXDI-2.31"),
        ("MAN@2.31.0", "DLC@2.31.0", "DOCS@2.31.0-vllm", "MAINT-NXDI-2.31", "MAINT-XLA"),
        _2_31_images("2.31.0"),
        note="vllm-neuron 0.21.0.1.0.0 (Beta, 2026-07-20) ships in the DLC but not in this tag's manifest",
    ),
    Release(
        "2.31.1",
        "2026-08-12",
        _2_31_PACKAGES,
        _2_31_backends("EOS-NXDI"),
        ("MAN@2.31.1", "DLC@2.31.1", "EOS-NXDI", "MAINT-XLA"),
        _2_31_images("2.31.1"),
        note="tools fix only; the last vLLM 0.16 (NxD Inference) and pytorch-inference-neuronx images",
    ),
    Release(
        "2.32.0",
        "2026-08-17",
        {
            "neuronx-cc": ("2.27.5334.0",),
            "libtorch-neuronx-lite": ("2.12.0.1.0.1284", "2.11.0.1.0.1284"),
            "nki": ("0.6.0",),
            "vllm-neuron": ("0.24.0.1.1.0",),
            "vllm": ("0.24.0",),
        },
        {"vllm-neuron": VLLM_NEURON},
        ("MAN@2.32.0", "DLC@2.32.0", "DOCS@2.32.0-content", "EOS-NXDI"),
        (_plugin_image("2.32.0", "0.24.0.1.1.0", "0.24.0", "313", "24.04", _2_32_IMAGE),),
        note="no NxD Inference and no torch-neuronx: NxDI users stay on 2.31 images",
    ),
    Release(
        "2.33.0",
        "2026-10-19",
        _2_33_PACKAGES,
        {"vllm-neuron": VLLM_NEURON_2_33},
        ("DOCS@2.33.0", "DOCS@2.33.0-torch", "EOS-NXDI", "VLLM-NEURON-ROUTE"),
        (_plugin_image("2.33.0", "0.29.0.1.2.0", "0.29.0", "314", "26.04", _2_33_IMAGE),),
        note="Ubuntu 26.04 / Python 3.14 images only; the native compile route is the default and its CPU "
        "compile is unverified (used only when sdk: names 2.33); the libtorch-neuronx-lite of this release and of "
        "its image was not found; TorchNeuron 2.13.3.0 / 2.14.3.0 (beta) is published as torch-neuronx beside "
        "the XLA 2.9.0.2.15.32035",
        torchneuron=_2_33_TORCHNEURON,
    ),
    Release(
        "2.33.1",
        "2026-11-11",
        {**_2_33_PACKAGES, "libtorch-neuronx-lite": _2_33_1_LITE, "libneuronxla": ("3.0.12293.0",)},
        {"vllm-neuron": VLLM_NEURON_2_33},
        ("DOCS@2.33.1", "DOCS@2.33.0", "DOCS@2.33.0-torch", "VLLM-NEURON-ROUTE"),
        note="runtime 2.35.33.0, collectives 2.35.49.0, libneuronxla 3.0.12293.0 and libtorch-neuronx-lite "
        "*.0.1.0.4089 (rebuilt); the rest is 2.33.0's. No DLC image: a 2.33.0 cache probably misses here (the "
        "lite version is part of every plugin cache key)",
        torchneuron=_2_33_TORCHNEURON,
    ),
)


__all__ = ["RELEASES", "SOURCES"]
