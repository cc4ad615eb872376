"""Where the support matrix's rows were read: one entry per source, cited by key in ``support_data``.

docs/backends.md lists them (``scripts/gen_support_matrix.py``). Nothing here is imported at runtime
but by ``support_data`` and the docs generator.
"""

from __future__ import annotations

SDK_REPO = "aws-neuron/aws-neuron-sdk"
DLC_REPO = "aws-neuron/deep-learning-containers"
DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en"

SOURCES: dict[str, str] = {
    **{
        f"MAN@{v}": f"{SDK_REPO} tag v{v}, src/helperscripts/n2-manifest.json (neuron_releases[{v}])"
        for v in ("2.26.1", "2.27.0", "2.27.1", "2.28.0", "2.29.0", "2.29.1", "2.30.0", "2.31.0", "2.31.1", "2.32.0")
    },
    "MAN@HEAD-2.28.1": f"{SDK_REPO} master @81ce03ae (2026-08-21), n2-manifest.json: the 2.28.1 entry "
    "(absent at the v2.28.1 tag); release-notes/prev/2.28.1.rst (driver and custom-op fixes only)",
    **{
        f"DLC@{t}": f"{DLC_REPO} tag {t}, README.md image table and vllm/inference/*/Dockerfile.neuronx ARG lines"
        for t in ("2.26.1", "2.27.0", "2.27.1", "2.28.0", "2.29.0", "2.29.1", "2.30.0", "2.31.0", "2.31.1", "2.32.0")
    },
    "DLC@6d82485": f"{DLC_REPO} commit 6d82485 (2026-01-26), vllm/inference/0.13.0/Dockerfile.neuronx: the "
    "vLLM 0.13.0 image of SDK 2.27.1 (vllm-neuron 0.3.0), added after the 2.27.1 tag",
    "DOCS@2.33.0": f"{DOCS}/v2.33.0/release-notes/components/index.html (component versions) and "
    f"{DOCS}/v2.33.0/setup/pytorch/update-dlc.html (image tag 0.29.0.1.2.0-neuronx-py314-sdk2.33.0-ubuntu26.04)",
    "DOCS@2.31.0-vllm": f"{DOCS}/v2.31.0/release-notes/components/index.html: vllm-neuron 0.21.0.1.0.0 "
    "'supports vLLM 0.21.0; vllm-neuron version is 1.0.0' (Beta, 2026-07-20)",
    "DOCS@2.32.0-content": f"{DOCS}/v2.32.0/release-notes/releasecontent.html: vllm_neuron-0.24.0.1.1.0 wheel",
    "EOS-NXDI": f"{DOCS}/latest/about-neuron/announcements/neuron2.x/announce-eos-nxdi-nxd-core-inference.html "
    "(posted 2026-10-16): NxD Inference support on Trn2/Trn3 ends starting 2.34; 'On Inf2 and Trn1 ... remain in "
    "maintenance mode at Neuron SDK 2.31'",
    "MAINT-NXDI-2.30": f"{DOCS}/v2.30.0/about-neuron/announcements/neuron2.x/"
    "announce-maintenance-nxdi-nxd-core-inference.html: NxD Inference in maintenance from 2.30.0",
    "MAINT-NXDI-2.31": f"{DOCS}/latest/about-neuron/announcements/neuron2.x/announce-nxdi-maintenance-support-2-31"
    ".html: NxD Inference 0.10.18399 (2.31.0) keeps critical fixes; no new releases",
    "RN-NXDI-2.29": f"{SDK_REPO} master, release-notes/components/nxd-inference.rst:61 (2.29.0 breaking change: "
    "'NxD Inference models are now only supported on Trn2 and newer hardware')",
    "EOS-TNX": f"{SDK_REPO} about-neuron/announcements: transformers-neuronx in maintenance from 2.24, end of "
    "support starting 2.26.0; the package is in MAN@2.26.1 and in no later manifest",
    "MAINT-XLA": f"{SDK_REPO} master, about-neuron/announcements/neuron2.x/announce-maintenance-pytorch-xla-"
    "inference.rst: PyTorch/XLA inference on Inf2/Trn1 in maintenance from 2.31 (torch-neuronx 2.9.0.2.15 last)",
    "OPT@0.4.5": "huggingface/optimum-neuron tags v0.4.3-v0.4.5, optimum/neuron/version.py __sdk_version__ = "
    "2.26.1; no release targets a later SDK (branches sdk-2.27, sdk2.31 unreleased at HEAD 213224e6, 2026-08-19)",
    "DOCS@2.33.1": f"{DOCS}/latest/release-notes/2.33.1.html (release-notes/2.33.1.rst, 2026-11-11), as read by "
    "the second audit (../shared/reference/neuron-stack-2026.md): runtime 2.35.33.0, collectives 2.35.49.0, "
    "libneuronxla 3.0.12293.0, libtorch_neuronx_lite 2.11/2.12/2.13.0.1.0.4089 ('rebuilt, no functional changes'); "
    "no other component changed and no 2.33.1 DLC tag was found",
    "DOCS@2.33.0-torch": f"{DOCS}/v2.33.0/release-notes/components/index.html (PyTorch NeuronX 2.9.0.2.15.32035; "
    "TorchNeuron (Beta) 2.14.3.0 and 2.13.3.0; Neuron Runtime Library 2.35.30.0) and "
    f"{DOCS}/latest/_sources/release-notes/components/torchneuron.rst (the native backend is published as "
    "torch-neuronx: 2.13.3.0.* for PyTorch 2.13, 2.14.3.0.* for PyTorch 2.14; Trn2 and Trn3)",
    "RN-PT-2.29": f"{DOCS}/v2.29.0/_sources/release-notes/components/pytorch.rst, 2.29.0 Breaking Changes: "
    "'PyTorch 2.9 is the last version using PyTorch/XLA'; from PyTorch 2.10 torch-neuronx is TorchNeuron",
    "RN@2.27.0": f"{SDK_REPO} tag v2.27.0, release-notes/2.27.0/index.rst (the PyTorch support and NxD Inference "
    "cards: 'Supports: Inf2, Trn1 / Trn1n, Trn2, Trn3') and nxd-inference.rst:20 ('Trn3 Platform Support'); "
    "tag v2.28.0 release-notes/2.28.0.rst (torch-neuronx card: Trn3). The manifests of 2.27.0-2.28.1 list trn3 "
    "for no package, not even neuronx-cc or the runtime (the first that does is 2.29.0's): their instance "
    "lists are not read for trn3",
    "VLLM-NEURON-ROUTE": "vllm-neuron docs/guides/how-to-choose-compilation-route (2.33: the native route, "
    "AOTAutograd + torch-mlir -> StableHLO -> neuronx-cc, is the default; XLA deprecated) and "
    "docs/design/compilation/cpu_compilation.md (CPU compile, read for the 0.21 line): no source says CPU compile "
    "works on the native route or what a native cache entry holds (second audit)",
    "VLLM-NEURON-LNC": "vllm-neuron docs (no LNC setting anywhere) and the plugin's neuronx-cc command in a "
    "public fork of its 0.21 line (no --lnc): no source supports LNC 1 for this path (second audit)",
    "DLC-ENV": f"{DLC_REPO} vllm/inference/0.21.0.1.0.0/Dockerfile.neuronx (tags 2.31.0, 2.31.1) and "
    "vllm/inference/0.24.0.1.1.0/Dockerfile.neuronx (tag 2.32.0): their ENV lines set LANG, LD_LIBRARY_PATH and "
    "PATH only (no NEURON_* or VLLM_NEURON_* variable); ARG PYTHON_VERSION=3.13.13 (the third audit read the "
    "same: 'the 0.24 Dockerfile sets no NEURON_* ENV')",
    "DLC-NO-SAGEMAKER": f"{DLC_REPO} tag 2.32.0, common/vllm_entrypoint.py (runs its arguments: "
    "subprocess.check_call(sys.argv[1:])) and vllm/inference/*/Dockerfile.neuronx (no serve program, no "
    "com.amazonaws.sagemaker label, unlike pytorch/inference/*): the vLLM images have no SageMaker serving "
    "integration",
}


__all__ = ["DLC_REPO", "DOCS", "SDK_REPO", "SOURCES"]
