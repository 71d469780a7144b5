"""``syncline`` command line.

    syncline devnet up|down|status        local anvil with the contracts deployed
    syncline deploy --rpc-url URL ...     deploy to any EVM chain
    syncline demo                         the main job (what `make demo` runs)
    syncline train post-task|list-runs|get-run|get-receipt|enroll-trainer|seal|claim
    syncline trainer|witness|challenger run --config FILE [--dev-account N]
    syncline network up|status|wait|down   the task's trainers and witnesses on the local devnet
    syncline api                          the sponsor API + web UI on http://127.0.0.1:8600

Bad input and failed calls print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from syncline.chain import enrollment, keys
from syncline.chain.deployment import Deployment, deploy_market
from syncline.chain.devnet import ANVIL, DEFAULT_DEVNET_CLOCK_SPEED, DevnetHome, local_devnet, start_anvil
from syncline.chain.market import SPEC_MAX_TRAINERS, SPEC_MIN_TRAINERS, SPEC_ROUNDS, MarketClient, TaskView
from syncline.chain.probe import check_market
from syncline.chain.rpc import http_web3
from syncline.demo.scenarios import SCENARIOS as FRAUD_SCENARIOS
from syncline.errors import KeyConfigError, SpecError, SynclineError
from syncline.observability import configure_logging, get_logger
from syncline.paths import repo_root, state_dir
from syncline.protocol.enums import TaskStatus
from syncline.protocol.spec import TrainingTaskSpec
from syncline.run.agent_config import TRAINER_MISBEHAVIOURS, WITNESS_MISBEHAVIOURS
from syncline.run.loop import pending_time

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from syncline.api.settings import ApiSettings
    from syncline.demo.lifecycle import Timing

log = get_logger("syncline.cli")


def devnet_dir() -> Path:
    return state_dir() / "devnet"


def default_deployment_path() -> Path:
    return devnet_dir() / "deployment.json"


# ---------------------------------------------------------------------- signer selection


def add_key_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("signing key (never logged)")
    g.add_argument(
        "--keystore",
        type=Path,
        help="encrypted eth-account keystore (password in $SYNCLINE_KEYSTORE_PASSWORD)",
    )
    g.add_argument("--key-env", default=keys.DEFAULT_KEY_ENV, help="environment variable holding a hex private key")
    g.add_argument(
        "--dev-account", type=int, help=f"index of an anvil development account (local devnet only: {DEV_ACCOUNTS})"
    )


DEV_ACCOUNTS = "0 sponsor, 1-3 trainers, 4-6 witnesses (examples/task.yaml), 7 anyone (seal, challenge)"
"""The local devnet's development accounts as the examples and ``syncline network up`` use them."""


def dev_signer(index: int) -> keys.Signer:
    """Anvil development account ``index`` of the local devnet (read from anvil's own config file)."""
    config = devnet_dir() / "anvil-config.json"
    if not config.exists():
        raise SynclineError("--dev-account needs a running `syncline devnet up`")
    dev_keys = json.loads(config.read_text())["private_keys"]
    if not 0 <= index < len(dev_keys):
        raise SynclineError(f"--dev-account must be within 0..{len(dev_keys) - 1}")
    return keys.from_private_key(dev_keys[index])


def signer_from_args(args: argparse.Namespace) -> keys.Signer:
    if args.dev_account is not None:
        return dev_signer(args.dev_account)
    return keys.resolve(args.keystore, args.key_env)


def market_from_args(args: argparse.Namespace) -> MarketClient:
    deployment = Deployment.read(args.deployment)
    w3 = http_web3(args.rpc_url or deployment.rpc_url)
    if not w3.is_connected():
        raise SynclineError(f"cannot reach {args.rpc_url or deployment.rpc_url}: is the node running?")
    check_market(w3, deployment.market, deployment.court, source=str(args.deployment))
    return MarketClient(w3, deployment.market, deployment.abi())


# ---------------------------------------------------------------------- devnet / deploy


def cmd_devnet_up(args: argparse.Namespace) -> int:
    """Start the devnet, or restart whichever of its services died (same port, same state)."""
    deployment, blob_url, started = DevnetHome(devnet_dir()).up(port=args.port, clock_speed=args.clock_speed)
    if started:
        log.info(
            "devnet.up",
            started=",".join(started),
            rpc_url=deployment.rpc_url,
            market=deployment.market,
            court=deployment.court,
            blob_store=blob_url,
        )
    else:
        log.info("devnet.already_running", rpc_url=deployment.rpc_url, blob_store=blob_url)
    print(json.dumps({**deployment.__dict__, "blob_store": blob_url, "started": started}, indent=2))
    return 0


def cmd_devnet_down(args: argparse.Namespace) -> int:
    stopped = DevnetHome(devnet_dir()).down()
    log.info("devnet.down" if stopped else "devnet.not_running", stopped=",".join(stopped))
    return 0


DEVNET_STATUS_EXIT = {"up": 0, "degraded": 1, "down": 3}
"""``syncline devnet status`` exit codes: every service up and answering, some not, none running."""


def cmd_devnet_status(args: argparse.Namespace) -> int:
    home = DevnetHome(devnet_dir())
    status = home.status()
    out = status.to_json()
    if status.service(ANVIL).alive and home.deployment_path.exists():
        out["deployment"] = json.loads(home.deployment_path.read_text())
    print(json.dumps(out, indent=2))
    for s in status.services:
        if not s.healthy:
            log.warning("devnet.service_unhealthy", service=s.name, pid=s.pid, url=s.url, problem=s.problem)
    return DEVNET_STATUS_EXIT[status.state]


def cmd_deploy(args: argparse.Namespace) -> int:
    w3 = http_web3(args.rpc_url)
    if not w3.is_connected():
        raise SynclineError(f"cannot reach {args.rpc_url}")
    deployment = deploy_market(w3, signer_from_args(args), args.rpc_url, args.out)
    log.info(
        "deployed",
        market=deployment.market,
        court=deployment.court,
        chain_id=deployment.chain_id,
        file=str(args.out / "deployment.json"),
    )
    print(json.dumps(deployment.__dict__, indent=2))
    return 0


# ---------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    if args.scenario == "lifecycle":
        return cmd_demo_lifecycle(args)
    if args.rpc_url or args.deployment or args.real_clock:
        raise SynclineError("--rpc-url, --deployment and --real-clock apply to --scenario lifecycle only")
    if args.scenario == "sft-lora":
        return cmd_demo_sft_lora(args)
    if args.scenario in MODALITY_SCENARIOS:
        return cmd_demo_modality(args)
    if args.scenario != "training":
        return cmd_demo_fraud(args)
    from syncline.demo.lifecycle import write_receipt
    from syncline.demo.training_run import TrainingDemo

    out = state_dir() / "demo"
    started = time.monotonic()
    log.info("demo.start", what="devnet + contracts + 3 trainers + 3 witnesses (k=2) training a Llama on Shakespeare")
    receipt = TrainingDemo(out, ui_port=None if args.ui_port < 0 else args.ui_port).run()
    path = write_receipt(receipt, out / "receipt.json")
    print(json.dumps(receipt.to_mapping(), indent=2))
    extras = receipt.extras
    log.info(
        "demo.done",
        receipt=str(path),
        validation_loss_first=round(extras["validation_loss_first"], 4),
        validation_loss_last=round(extras["validation_loss_last"], 4),
        late_commits=receipt.late_commits,
        verdict=receipt.verdict(),
        seconds=round(time.monotonic() - started, 1),
    )
    return 0


def cmd_demo_sft_lora(args: argparse.Namespace) -> int:
    """A pretrained base built here, fine-tuned with LoRA on a JSONL instruction set through the market."""
    from syncline.demo.lifecycle import write_receipt
    from syncline.demo.sft_lora import SftLoraDemo

    out = state_dir() / "demo" / "sft-lora"
    log.info(
        "demo.start", what="local pretraining of a base Llama, then LoRA SFT on a JSONL instruction set via the market"
    )
    receipt = SftLoraDemo(out).run()
    path = write_receipt(receipt, out / "receipt.json")
    print(json.dumps(receipt.to_mapping(), indent=2))
    extras = receipt.extras
    log.info(
        "demo.done",
        receipt=str(path),
        validation_loss_per_round=[round(v, 4) for v in extras["validation_loss_per_round"]],
        lora_payload_bytes=extras["lora_payload_bytes"],
        full_model_payload_bytes=extras["full_model_payload_bytes"],
        adapter_sample=extras["adapter_sample_text"],
    )
    return 0


MODALITY_SCENARIOS: dict[str, tuple[str, str]] = {
    "vision": ("syncline.demo.vision", "VisionDemo"),
    "timeseries": ("syncline.demo.timeseries", "TimeSeriesDemo"),
    "confidential": ("syncline.demo.confidential", "ConfidentialDemo"),
    "dp": ("syncline.demo.dp", "DpDemo"),
}
"""The other modalities' scenarios: ``syncline demo --scenario NAME`` runs the class (``run()``
returns the receipt) in ``.syncline/demo/NAME``."""


def cmd_demo_modality(args: argparse.Namespace) -> int:
    """A time-series or vision task through the whole market; the receipt names its metric."""
    import importlib

    from syncline.demo.lifecycle import write_receipt

    module, name = MODALITY_SCENARIOS[args.scenario]
    out = state_dir() / "demo" / args.scenario
    log.info("demo.start", scenario=args.scenario, what="devnet + contracts + 3 trainers + 3 witnesses (k=2)")
    receipt = getattr(importlib.import_module(module), name)(out).run()
    path = write_receipt(receipt, out / "receipt.json")
    print(json.dumps(receipt.to_mapping(), indent=2))
    extras = receipt.extras
    log.info(
        "demo.done",
        receipt=str(path),
        metric=extras.get("validation_metric"),
        per_round=[round(v, 4) for v in extras.get("validation_metric_per_round", [])],
    )
    return 0


def cmd_demo_fraud(args: argparse.Namespace) -> int:
    """One cheater per scenario, caught by the challenger: ``--scenario NAME`` or ``fraud`` for all."""
    from syncline.demo.fraud import run_scenario

    names = list(FRAUD_SCENARIOS) if args.scenario == "fraud" else [args.scenario]
    summary: list[tuple[str, str, str, object]] = []
    for name in names:
        log.info("demo.fraud.start", scenario=name, cheat=FRAUD_SCENARIOS[name].story)
        report = run_scenario(name, state_dir() / "demo-fraud" / name)
        summary.extend((name, c["kind"], c["status"], c["time_to_proof_s"]) for c in report.challenges)
    print("\nscenario | challenge | outcome | seconds from the round's close to the proof")
    for row in summary:
        print(" | ".join(str(x) for x in row))
    return 0


def cmd_challenger_run(args: argparse.Namespace) -> int:
    from syncline.challenger.agent import ChallengerAgent

    cfg, signer, market, blobs = _agent_setup(args)
    log.info("challenger.start", task_id=cfg.task_id, challenger=signer.address, training_checks=cfg.training_checks)
    ChallengerAgent(cfg, signer, market, blobs).run()
    return 0


def cmd_demo_lifecycle(args: argparse.Namespace) -> int:
    from syncline.demo.lifecycle import Cast, Lifecycle, write_receipt

    if args.rpc_url or args.deployment:
        return cmd_demo_lifecycle_any_chain(args)
    out = state_dir() / "demo-lifecycle"
    started = time.monotonic()
    real_clock = args.real_clock
    log.info("demo.start", what="local devnet + contracts + scripted market lifecycle", real_clock=real_clock)
    # the real clock needs blocks that come on their own: anvil mines one a second
    with start_anvil(out / "anvil", block_time=1 if real_clock else None) as devnet:
        signers = [keys.from_private_key(k) for k in devnet.private_keys()]
        log.info("devnet.up", rpc_url=devnet.rpc_url)
        deployment = deploy_market(devnet.web3(), signers[0], devnet.rpc_url, out)
        log.info(
            "contracts.deployed", market=deployment.market, court=deployment.court, block=deployment.deployed_at_block
        )
        market = MarketClient.from_deployment(deployment, devnet.web3())
        cast = Cast(sponsor=signers[0], trainers=signers[1:4], witnesses=signers[4:7], anyone=signers[7])
        lifecycle = (
            Lifecycle(market, cast, time_travel=False, timing=_real_clock_timing(args))
            if real_clock
            else Lifecycle(market, cast)
        )
        receipt = lifecycle.run()
    path = write_receipt(receipt, out / "receipt.json")
    print(json.dumps(receipt.to_mapping(), indent=2))
    log.info("demo.done", receipt=str(path), seconds=round(time.monotonic() - started, 1))
    return 0


def _real_clock_timing(args: argparse.Namespace) -> Timing:
    from syncline.demo.lifecycle import real_clock_timing

    try:
        return real_clock_timing(args.round_duration)
    except ValueError as exc:
        raise SynclineError(f"--round-duration: {exc}") from None


def cmd_demo_lifecycle_any_chain(args: argparse.Namespace) -> int:
    """The market walk-through on any EVM chain (``--rpc-url`` and/or ``--deployment``): real
    clock, standard JSON-RPC only; the operator's key sponsors and funds the derived role accounts."""
    from syncline.demo.lifecycle import ETH, Lifecycle, derived_cast, fund_cast, write_receipt

    started = time.monotonic()
    known = Deployment.read(args.deployment) if args.deployment else None
    rpc_url = args.rpc_url or (known.rpc_url if known else "")
    w3 = http_web3(rpc_url)
    if not w3.is_connected():
        raise SynclineError(f"cannot reach {rpc_url}: is the node running?")
    chain_id = int(w3.eth.chain_id)
    funder = signer_from_args(args)
    out = state_dir() / "demo-lifecycle" / f"chain-{chain_id}"
    timing = _real_clock_timing(args)
    unit = ETH // 1000  # stakes, bonds and the reward pool in milli-ether on a shared chain
    log.info("demo.start", what="scripted market lifecycle on the real clock", rpc_url=rpc_url, chain_id=chain_id)
    if known is None:
        deployment = deploy_market(w3, funder, rpc_url, out)
        log.info("contracts.deployed", market=deployment.market, court=deployment.court)
    else:
        if known.chain_id != chain_id:
            raise SynclineError(f"{args.deployment} is for chain {known.chain_id}, but {rpc_url} is chain {chain_id}")
        deployment = known
        check_market(w3, deployment.market, deployment.court, source=str(args.deployment))
    market = MarketClient(w3, deployment.market, deployment.abi())
    cast = derived_cast(funder)
    funded = fund_cast(w3, cast, unit)
    log.info(
        "cast.funded",
        sponsor=funder.address,
        roles=",".join(s.address for s in [*cast.trainers, *cast.witnesses, cast.anyone]),
        sent_eth=round(sum(funded.values()) / ETH, 6),
    )
    receipt = Lifecycle(market, cast, time_travel=False, timing=timing, unit_wei=unit).run()
    path = write_receipt(receipt, out / "receipt.json")
    print(json.dumps(receipt.to_mapping(), indent=2))
    log.info("demo.done", receipt=str(path), seconds=round(time.monotonic() - started, 1))
    return 0


# ---------------------------------------------------------------------- train (sponsor and trainer)


def cmd_post_task(args: argparse.Namespace) -> int:
    try:
        raw = yaml.safe_load(Path(args.spec).read_text())
    except OSError as exc:
        raise SpecError(f"cannot read spec {args.spec}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"spec {args.spec} is not valid YAML: {str(exc).splitlines()[0]}") from None
    market = market_from_args(args)
    signer = signer_from_args(args)
    # The next block's time: on an idle devnet the latest block may be minutes old, and a deadline
    # of "+600" counted from it would already have passed when the task is mined.
    now = pending_time(market.w3)
    if (
        isinstance(raw, dict)
        and isinstance(raw.get("enrollment_deadline"), str)
        and raw["enrollment_deadline"].startswith("+")
    ):
        raw["enrollment_deadline"] = now + int(raw["enrollment_deadline"][1:])
    # Everything is checked before anything is built or published: a bad spec costs no upload.
    pretrained = isinstance(raw, dict) and isinstance(raw.get("model"), dict) and "pretrained" in raw["model"]
    if pretrained and "dataset_source" not in raw:
        raise SpecError("model.pretrained: name the training data in dataset_source (the model's tokenizer reads it)")
    lora_new = (
        isinstance(raw, dict)
        and isinstance(raw.get("model"), dict)
        and isinstance(raw["model"].get("lora"), dict)
        and "base" not in raw["model"]["lora"]
    )
    if lora_new and "dataset_source" not in raw:
        raise SpecError(
            "model.lora: name the training data in dataset_source (the tooling then publishes the base model)"
        )
    if isinstance(raw, dict) and ("image_source" in raw or "series_source" in raw):
        spec, spec_uri = _publish_other_modality(args, raw, now=now, sponsor=signer.address, account=signer.account)
    elif isinstance(raw, dict) and "dataset_source" in raw:
        spec, spec_uri = _publish_from_source(args, raw, now=now, sponsor=signer.address, account=signer.account)
    else:
        spec = TrainingTaskSpec.from_mapping(raw).validate(now=now, sponsor=signer.address)
        spec_path = state_dir() / "specs" / f"{spec.spec_hash[2:]}.json"
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_bytes(spec.canonical_bytes())
        spec_uri = args.spec_uri or _publish_spec(args, spec)
    task_id, receipt = market.post_task(signer, spec, spec_uri)
    if spec.confidential is not None:  # the attestation policy, before anyone enrolls
        market.configure_confidential(signer, task_id, spec.confidential.verifier, list(spec.confidential.measurements))
    print(
        json.dumps(
            {
                "task_id": task_id,
                "spec_hash": spec.spec_hash,
                "spec_uri": spec_uri,
                "escrow_wei": spec.escrow_wei,
                "tx": "0x" + bytes(receipt["transactionHash"]).hex(),
            }
        )
    )
    return 0


def cmd_install_sealed_manifest(args: argparse.Namespace) -> int:
    """Wrap a Confidential task's data keys to every enclave admitted since the last version and
    install the new sealed manifest on chain (nothing when no enclave is new)."""
    from syncline.blobstore import HttpBlobStore
    from syncline.confidential.sponsor import bind_keys_to_task, install_manifest

    market = market_from_args(args)
    signer = signer_from_args(args)
    blobs = HttpBlobStore(blob_store_from_args(args, "the sealed manifest is published"))
    keys_file = args.keys or sealing_keys_path("0x" + bytes(market.spec_tuple(args.task_id)[0]).hex())
    if args.bind_keys:
        binding = bind_keys_to_task(market, blobs, args.task_id, Path(keys_file), signer.address)
        log.info("sponsor.data_keys_bound", task_id=args.task_id, sponsor=binding.sponsor, verifier=binding.verifier)
    installed = install_manifest(market, signer, blobs, args.task_id, Path(keys_file))
    print(json.dumps(installed.to_mapping()))
    return 0


def cmd_get_sealed_manifest(args: argparse.Namespace) -> int:
    """A Confidential task's sealed manifest as the chain names it: hash, URI, version and envelopes."""
    from syncline.blobstore import HttpBlobStore
    from syncline.confidential.sponsor import current_manifest, task_spec

    market = market_from_args(args)
    blobs = HttpBlobStore(blob_store_from_args(args, "the sealed manifest is read"))
    manifest_hash, uri, version = market.get_sealed_manifest(args.task_id)
    out: dict[str, Any] = {
        "task_id": args.task_id,
        "manifest_hash": "0x" + manifest_hash.hex(),
        "uri": uri,
        "version": version,
    }
    if version > 0:
        manifest, _ = current_manifest(market, blobs, args.task_id, task_spec(market, blobs, args.task_id))
        assert manifest is not None
        out["manifest"] = manifest.to_mapping() if args.full else None
        out["shards"] = len(manifest.shards)
        out["enclaves"] = sorted("0x" + k.hex() for k in manifest.enclaves())
        out["envelopes"] = len(manifest.envelopes)
    print(json.dumps(out, indent=2))
    return 0


def blob_store_from_args(args: argparse.Namespace, why: str) -> str:
    """``--blob-store``, else the local devnet's blob service (``.syncline/devnet/blobstore.json``)."""
    url = args.blob_store or local_devnet().blob_url()
    if not url:
        raise SynclineError(f"{why}: pass --blob-store URL, or run `syncline devnet up` for a local one")
    return str(url)


def _publish_spec(args: argparse.Namespace, spec: TrainingTaskSpec) -> str:
    """Publish the spec artifact to ``--blob-store``: agents fetch locators from the chain over http(s) only."""
    from syncline.blobstore import HttpBlobStore

    url = args.blob_store or local_devnet().blob_url()
    if not url:
        raise SpecError(
            "pass --spec-uri http(s)://... or --blob-store URL (or run `syncline devnet up`): "
            "agents fetch the spec over http(s) only"
        )
    return HttpBlobStore(url).put(spec.canonical_bytes()).uri


def _publish_other_modality(
    args: argparse.Namespace, raw: dict[str, Any], *, now: int, sponsor: str, account: LocalAccount | None = None
) -> tuple[TrainingTaskSpec, str]:
    """A vision spec (``image_source``) or a time-series spec (``series_source`` and ``windows``):
    checked, its artifacts built from the source and published; returns the spec. A relative
    ``path`` is read from the spec file's directory."""
    from syncline.blobstore import HttpBlobStore

    base_dir = Path(args.spec).resolve().parent
    template = dict(raw)
    model = template.pop("model", None)
    if model is not None and not isinstance(model, dict):
        raise SpecError("model: expected a mapping with family and the architecture config")
    blobs = HttpBlobStore(blob_store_from_args(args, "a spec with a data source publishes its artifacts"))
    if "image_source" in template:
        from syncline.sponsor.vision_task import (
            DEFAULT_VISION_MODEL,
            ImageSource,
            check_vision_template,
            publish_vision_task,
        )

        described = dict(template.pop("image_source") or {})
        sizes = {k: described.pop(k) for k in ("shard_count", "image_size", "num_channels") if k in described}
        template.pop("modality", None)
        images = ImageSource.from_mapping(described, base_dir=base_dir)
        shard_count = int(sizes.get("shard_count", 6))
        check_vision_template(
            template,
            shard_count=shard_count,
            model=model or DEFAULT_VISION_MODEL,
            now=now,
            sponsor=sponsor,
            **{k: int(v) for k, v in sizes.items() if k in ("image_size", "num_channels")},
        )
        published = publish_vision_task(
            blobs,
            template=template,
            shard_count=shard_count,
            model=model or DEFAULT_VISION_MODEL,
            source=images,
            image_size=int(sizes["image_size"]) if "image_size" in sizes else None,
            num_channels=int(sizes["num_channels"]) if "num_channels" in sizes else None,
            sponsor=account,
        )
    else:
        from syncline.sponsor.timeseries_task import (
            SeriesSource,
            WindowPlan,
            check_timeseries_template,
            publish_timeseries_task,
        )

        described = dict(template.pop("series_source") or {})
        shard_count = int(described.pop("shard_count", 6))
        if described.get("path"):
            described["path"] = str((base_dir / Path(str(described["path"])).expanduser()).resolve())
        plan = WindowPlan.from_mapping(dict(template.pop("windows", None) or {}))
        template.pop("modality", None)
        series = SeriesSource.from_mapping(described)
        check_timeseries_template(
            template,
            shard_count=shard_count,
            model=model,
            plan=plan,
            num_channels=len(series.value_columns) if series.type != "statsmodels" else 1,
            num_covariates=len(series.covariates),
            now=now,
            sponsor=sponsor,
        )
        published = publish_timeseries_task(
            blobs, template=template, model=model, source=series, plan=plan, shard_count=shard_count, sponsor=account
        )
    log.info("sponsor.published", spec_hash=published.spec.spec_hash, params=published.initial_state.layout.numel)
    return published.spec, published.spec_uri


def _publish_from_source(
    args: argparse.Namespace, raw: dict[str, Any], *, now: int, sponsor: str, account: LocalAccount | None = None
) -> tuple[TrainingTaskSpec, str]:
    """A sponsor spec that names its data source: check it, build and publish the artifacts, return the spec."""
    from syncline.blobstore import HttpBlobStore
    from syncline.sponsor.data_sources import DatasetPlan
    from syncline.sponsor.pretrained import PretrainedModel, read_pretrained, resolve_model_dir
    from syncline.sponsor.task_builder import check_language_template, publish_language_task

    blob_url = blob_store_from_args(args, "a spec with dataset_source publishes its artifacts")
    template = dict(raw)
    # A relative dataset_source.path is read from the spec file's directory.
    base_dir = Path(args.spec).resolve().parent
    method = str(template.pop("method", "pretrain"))  # sft: the loss on the responses of prompt/response pairs
    raw_model = template.pop("model", None)
    lora = None
    if isinstance(raw_model, dict) and "lora" in raw_model:  # LoRA adapters on the model (its weights frozen)
        raw_model = dict(raw_model)
        lora = raw_model.pop("lora")
        if not isinstance(lora, dict):
            raise SpecError("model.lora: expected a mapping (r, alpha, target_modules)")
    pretrained = isinstance(raw_model, dict) and "pretrained" in raw_model
    plan = DatasetPlan.from_mapping(template.pop("dataset_source"), base_dir=base_dir, vocab_from_model=pretrained)
    model: dict[str, Any] | PretrainedModel
    if isinstance(raw_model, dict) and "pretrained" in raw_model:
        extra = sorted(set(raw_model) - {"pretrained"})
        if extra or not isinstance(raw_model["pretrained"], str):
            raise SpecError(
                "model.pretrained: a Hugging Face model directory (a path), with no other model keys but lora "
                "(its config.json sets the architecture)"
            )
        # A relative path is read from the spec file's directory, as dataset_source.path is.
        model = read_pretrained(resolve_model_dir(raw_model["pretrained"], base_dir=base_dir))
    elif isinstance(raw_model, dict) and "family" in raw_model:
        model = raw_model
    else:
        raise SpecError(
            "model: expected a mapping with family and the architecture config, or pretrained: a model directory"
        )
    seal = _sealing_request(template.pop("confidential", None))
    check_language_template(template, shard_count=plan.shard_count, model=model, now=now, sponsor=sponsor, lora=lora)
    published = publish_language_task(  # reads and checks the source before uploading anything
        HttpBlobStore(blob_url),
        template=template,
        shard_count=plan.shard_count,
        vocab_size=plan.vocab_size,
        seq_len=plan.seq_len,
        model=model,
        source=plan.source,
        method=method,
        lora=lora,
        seal=seal,
        sponsor=account,
    )
    if published.sealed is not None and published.spec.confidential is not None:
        from syncline.confidential.keystore import StoreBinding, write_data_keys

        keys_path = sealing_keys_path(published.spec.spec_hash)
        c = published.spec.confidential  # bound to this sponsor and policy: no one else's task gets the keys
        binding = StoreBinding.of(sponsor, c.verifier, c.measurements)
        write_data_keys(keys_path, published.sealed, _sealing_password(), binding=binding)
        log.info("sponsor.sealed", shards=published.spec.dataset.shard_count, data_keys=str(keys_path))
    log.info("sponsor.published", spec_hash=published.spec.spec_hash, params=published.initial_state.layout.numel)
    return published.spec, published.spec_uri


def sealing_keys_path(spec_hash: str) -> Path:
    """Where ``post-task`` keeps a Confidential task's data keys (encrypted, $SYNCLINE_SEALING_PASSWORD)."""
    return state_dir() / "sealing" / f"{spec_hash[2:]}.json"


def _sealing_password() -> str:
    from syncline.confidential.keystore import SEALING_PASSWORD_ENV

    password = os.environ.get(SEALING_PASSWORD_ENV)
    if not password:
        raise KeyConfigError(f"a Confidential task's data keys are stored encrypted: set ${SEALING_PASSWORD_ENV}")
    return password


def _sealing_request(raw: object) -> Any:
    """A spec template's ``confidential`` mapping (``verifier``, ``measurements``) as a SealingRequest."""
    if raw is None:
        return None
    from syncline.confidential.sponsor import SealingRequest

    if not isinstance(raw, dict) or set(raw) != {"verifier", "measurements"}:
        raise SpecError("confidential: expected a mapping of verifier and measurements (dataset_id is generated)")
    measurements = raw["measurements"]
    if not isinstance(measurements, list):
        raise SpecError("confidential.measurements: expected a list of 0x 32-byte hex values")
    _sealing_password()  # before anything is built: the keys must have somewhere to go
    return SealingRequest(str(raw["verifier"]), tuple(str(m) for m in measurements))


def cmd_list_runs(args: argparse.Namespace) -> int:
    market = market_from_args(args)
    now = pending_time(market.w3)
    rows = []
    for task_id in range(1, market.task_count() + 1):
        t = market.task(task_id)
        rows.append(
            {
                "task_id": task_id,
                "status": t.status.name.lower(),
                "progress": run_progress(t, market.spec_tuple(task_id), now),
                "enrolled": t.enrolled,
                "round": t.current_round,
                "finalized": t.rounds_finalized,
                "carried_forward": t.rounds_carried,
                "reward_pool_wei": t.reward_pool_wei,
            }
        )
    print(json.dumps(rows, indent=2))
    return 0


def run_progress(t: TaskView, onchain_spec: Sequence[Any], now: int | None = None) -> str:
    """Where a run stands, in words: ``enrolling: 1 of 3 trainers``, ``running: round 2 of 8``;
    with the chain's time ``now``, once the enrollment deadline passed, ``underfilled: cancellable``
    (fewer than ``min_trainers`` enrolled: it can only be cancelled) or ``enrollment closed:
    startable`` (enough enrolled: anyone may start the run)."""
    low, high = int(onchain_spec[SPEC_MIN_TRAINERS]), int(onchain_spec[SPEC_MAX_TRAINERS])
    rounds = int(onchain_spec[SPEC_ROUNDS])
    if now is not None and enrollment.is_cancellable(t, onchain_spec, now):
        return (
            f"underfilled: cancellable ({t.enrolled} of the {low} trainers needed enrolled by the deadline; "
            f"`syncline train cancel-underfilled --task-id {t.task_id}` refunds the sponsor and every stake)"
        )
    if now is not None and enrollment.is_startable(t, onchain_spec, now):
        return (
            f"enrollment closed: startable ({t.enrolled} of {low}-{high} trainers enrolled by the deadline; "
            f"`syncline train start-run --task-id {t.task_id}` or any trainer agent starts the run)"
        )
    if t.status == TaskStatus.ENROLLING:
        wanted = str(high) if low == high else f"{low}-{high}"
        starts = (
            f"starts when {high} have enrolled"
            if low == high
            else f"starts at {high}, or at the enrollment deadline with at least {low}"
        )
        return f"enrolling: {t.enrolled} of {wanted} trainers (the run {starts})"
    if t.status == TaskStatus.RUNNING:
        return f"running: round {t.current_round + 1} of {rounds} ({t.rounds_finalized} finalized), {t.active} trainers"
    if t.status == TaskStatus.AWAITING_SEAL:
        return f"awaiting seal: all {rounds} rounds closed ({t.rounds_finalized} finalized)"
    return t.status.name.lower()


def cmd_get_run(args: argparse.Namespace) -> int:
    market = market_from_args(args)
    t = market.task(args.task_id)
    trainers = {}
    for address in market.trainers(args.task_id):
        r = market.trainer(args.task_id, address)
        trainers[address] = {
            "fragment": r.fragment,
            "shards": r.shards,
            "submitted": r.submitted,
            "accepted": r.accepted,
            "missed_rounds": r.missed,
            "evicted": r.evicted,
            "stake_wei": r.stake_wei,
            "slashed_wei": r.slashed_wei,
            "current_reward": r.reward_wei,
        }
    out = {
        "task_id": args.task_id,
        "progress": run_progress(t, market.spec_tuple(args.task_id), pending_time(market.w3)),
        "state": {k: (v.name.lower() if hasattr(v, "name") else v) for k, v in t.__dict__.items()},
        "trainer_metrics": trainers,
    }
    print(json.dumps(out, indent=2))
    return 0


def cmd_get_receipt(args: argparse.Namespace) -> int:
    market = market_from_args(args)
    receipt = market.receipt(args.task_id)
    since = Deployment.read(args.deployment).deployed_at_block
    print(
        dataclasses.replace(receipt, extras={**receipt.extras, **round_metrics(market, args.task_id, since)}).to_json()
    )
    # In plain words beside the JSON: a sealed run that trained nothing is not a success.
    print(f"task {args.task_id} {receipt.verdict()}", file=sys.stderr)
    return 0


def round_metrics(market: MarketClient, task_id: int, since: int = 0) -> dict[str, Any]:
    """The witnesses' validation metric per round, as the demo's receipt has it: the median of the
    finalizing votes' ``metric / 1e6`` (``None`` for a round not finalized, or with no metric);
    a language task's also as ``validation_loss_per_round``."""
    from syncline.api.events import validation_loss
    from syncline.protocol.enums import Modality, RoundStatus
    from syncline.protocol.spec import VALIDATION_METRICS

    onchain_spec = market.spec_tuple(task_id)
    name = VALIDATION_METRICS[Modality(int(onchain_spec[5]))][0]
    votes: dict[int, list[tuple[str, int]]] = {}
    for e in market.get_logs("VoteCast", from_block=since, taskId=task_id):
        votes.setdefault(int(e["args"]["round"]), []).append(
            ("0x" + bytes(e["args"]["result"]).hex(), int(e["args"]["metric"]))
        )
    per_round: list[float | None] = []
    late: list[int] = []
    for round_ in range(int(onchain_spec[SPEC_ROUNDS])):
        r = market.round(task_id, round_)
        late.append(r.late_mask.bit_count())
        per_round.append(
            validation_loss(votes.get(round_, []), r.result) if r.status == RoundStatus.FINALIZED else None
        )
    out: dict[str, Any] = {
        "validation_metric": name,
        "validation_metric_per_round": per_round,
        "late_commits_per_round": late,
    }
    if name == "validation_loss":
        out["validation_loss_per_round"] = per_round
    return out


def cmd_enroll(args: argparse.Namespace) -> int:
    market = market_from_args(args)
    fragment, _ = market.enroll(signer_from_args(args), args.task_id)
    print(json.dumps({"task_id": args.task_id, "fragment": fragment, "status": "enrolled"}))
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    market = market_from_args(args)
    market.seal(signer_from_args(args), args.task_id)
    print(market.receipt(args.task_id).to_json())
    return 0


def cmd_cancel_underfilled(args: argparse.Namespace) -> int:
    """Cancel a task whose enrollment deadline passed with fewer than ``min_trainers`` enrolled
    (anyone may): the sponsor's escrow, every stake and bond become withdrawable credit."""
    market = market_from_args(args)
    cancelled = enrollment.cancel(market, signer_from_args(args), args.task_id)
    t = market.task(args.task_id)
    print(
        json.dumps(
            {
                "task_id": args.task_id,
                "status": t.status.name.lower(),
                "cancelled_now": cancelled,
                "sponsor_refund_wei": t.sponsor_refund_wei,
                "next": "each account withdraws its credit: `syncline train claim` (see `syncline account`)",
            }
        )
    )
    return 0


def cmd_start_run(args: argparse.Namespace) -> int:
    """Start a run whose enrollment deadline passed with at least ``min_trainers`` (anyone may)."""
    market = market_from_args(args)
    started = enrollment.start(market, signer_from_args(args), args.task_id)
    t = market.task(args.task_id)
    print(json.dumps({"task_id": args.task_id, "status": t.status.name.lower(), "started_now": started}))
    return 0


def cmd_account(args: argparse.Namespace) -> int:
    """An account's wallet balance, its withdrawable credit, and what each task credited it."""
    from web3 import Web3

    if not isinstance(args.address, str) or not Web3.is_address(args.address):
        raise SynclineError(f"--address {args.address!r} is not an address (0x and 40 hex digits)")
    address = Web3.to_checksum_address(args.address)
    market = market_from_args(args)
    since = Deployment.read(args.deployment).deployed_at_block
    credited: dict[tuple[int, str], int] = {}
    for e in market.get_logs("Credited", from_block=since, account=address):
        key = (int(e["args"]["taskId"]), bytes(e["args"]["reason"]).rstrip(b"\0").decode(errors="replace"))
        credited[key] = credited.get(key, 0) + int(e["args"]["amount"])
    withdrawn = sum(int(e["args"]["amount"]) for e in market.get_logs("Withdrawn", from_block=since, account=address))
    out = {
        "address": address,
        "chain_id": int(market.w3.eth.chain_id),
        "balance_wei": int(market.w3.eth.get_balance(address)),
        "withdrawable_wei": market.credit_of(address),
        "withdrawn_wei": withdrawn,
        "credited": [
            {"task_id": task, "reason": reason, "wei": wei} for (task, reason), wei in sorted(credited.items())
        ],
    }
    print(json.dumps(out, indent=2))
    return 0


def cmd_claim(args: argparse.Namespace) -> int:
    market = market_from_args(args)
    amount, _ = market.withdraw(signer_from_args(args))
    print(json.dumps({"withdrawn_wei": amount}))
    return 0


# ---------------------------------------------------------------------- agents


def _agent_setup(args: argparse.Namespace) -> tuple[Any, keys.Signer, MarketClient, Any]:
    from syncline.blobstore import HttpBlobStore
    from syncline.run.agent_config import load_agent_config

    overrides = {"task_id": args.task_id, "misbehave": getattr(args, "misbehave", None)}
    cfg = load_agent_config(args.config, overrides)
    if args.dev_account is not None:
        devnet_rpc = local_devnet().rpc_url()
        if devnet_rpc is None or cfg.node_rpc.rstrip("/") != devnet_rpc.rstrip("/"):
            raise SynclineError(
                f"--dev-account signs with the local devnet's development keys; node_rpc {cfg.node_rpc} "
                f"is not the devnet's ({devnet_rpc or 'none is running: `syncline devnet up`'})"
            )
        signer = dev_signer(args.dev_account)
    else:
        signer = keys.resolve(cfg.keystore, cfg.key_env)
    deployment = Deployment.read(cfg.deployment)
    w3 = http_web3(cfg.node_rpc)
    if not w3.is_connected():
        raise SynclineError(f"cannot reach node_rpc {cfg.node_rpc}")
    check_market(w3, deployment.market, deployment.court, source=str(cfg.deployment))
    market = MarketClient(w3, deployment.market, deployment.abi())
    return cfg, signer, market, HttpBlobStore(cfg.blob_store)


def cmd_trainer_run(args: argparse.Namespace) -> int:
    from syncline.trainer.agent import TrainerAgent

    cfg, signer, market, blobs = _agent_setup(args)
    log.info("trainer.start", task_id=cfg.task_id, trainer=signer.address, misbehave=cfg.misbehave)
    TrainerAgent(cfg, signer, market, blobs).run()
    return 0


def cmd_witness_run(args: argparse.Namespace) -> int:
    from syncline.witness.agent import WitnessAgent

    cfg, signer, market, blobs = _agent_setup(args)
    log.info("witness.start", task_id=cfg.task_id, witness=signer.address, misbehave=cfg.misbehave)
    WitnessAgent(cfg, signer, market, blobs).run()
    return 0


def cmd_download_model(args: argparse.Namespace) -> int:
    from syncline.blobstore import HttpBlobStore
    from syncline.run.context import TaskContext
    from syncline.sponsor.task_builder import export_model

    market = market_from_args(args)
    blob_url = blob_store_from_args(args, "the model is read from a blob store")
    ctx = TaskContext.load(market, HttpBlobStore(blob_url), args.task_id)
    root = market.task(args.task_id).state_root
    out = export_model(ctx, root, Path(args.out))
    print(json.dumps({"task_id": args.task_id, "state_root": root, "out": str(out)}))
    return 0


def cmd_submit_gradient(args: argparse.Namespace) -> int:
    """Commit a quantized outer gradient (safetensors payload) produced by your own inner loop."""
    from syncline.blobstore import HttpBlobStore
    from syncline.protocol.chunking import gradient_chunk_root
    from syncline.protocol.hashing import keccak
    from syncline.protocol.quantization import QuantizedGradient

    market = market_from_args(args)
    try:
        payload = Path(args.payload).read_bytes()
    except OSError as exc:
        raise SynclineError(f"cannot read payload {args.payload}: {exc.strerror}") from None
    try:
        qg = QuantizedGradient.from_safetensors_bytes(payload)
    except ValueError as exc:
        raise SynclineError(f"payload {args.payload} is not a quantized gradient: {exc}") from None
    signer = signer_from_args(args)
    me = market.trainer(args.task_id, signer.address)
    if not me.enrolled:
        raise SynclineError(f"{signer.address} is not enrolled in task {args.task_id}")
    ref = HttpBlobStore(args.blob_store).put(payload)
    round_ = market.task(args.task_id).current_round if args.round is None else args.round
    market.commit_submission(
        signer,
        args.task_id,
        round_,
        me.fragment,
        keccak(payload),
        gradient_chunk_root(qg),
        ref.uri,
        checkpoint_root=args.checkpoint_root,
    )
    print(json.dumps({"task_id": args.task_id, "round": round_, "fragment": me.fragment, "payload": ref.digest}))
    return 0


def cmd_finalize_round(args: argparse.Namespace) -> int:
    """Cast a witness vote by hand (the witness agent does this automatically)."""
    market = market_from_args(args)
    market.finalize_round(
        signer_from_args(args), args.task_id, args.round, args.state_root, args.aggregate_root, args.accepted_mask
    )
    r = market.round(args.task_id, args.round)
    print(
        json.dumps(
            {"task_id": args.task_id, "round": args.round, "status": r.status.name.lower(), "votes": r.vote_count}
        )
    )
    return 0


# ---------------------------------------------------------------------- network (local agents)


def _local_network() -> Any:
    from syncline.run.network import LocalNetwork

    return LocalNetwork(state_dir() / "network", local_devnet())


def cmd_network_up(args: argparse.Namespace) -> int:
    """Start the task's trainers and witnesses on the local devnet, detached; print them as JSON."""
    network = _local_network()
    agents = network.up(
        args.task_id, trainer_config=args.trainer_config, witness_config=args.witness_config, trainers=args.trainers
    )
    print(json.dumps([_agent_row(a) for a in agents], indent=2))
    log.info(
        "network.up",
        task_id=args.task_id,
        trainers=sum(a.role == "trainer" for a in agents),
        witnesses=sum(a.role == "witness" for a in agents),
        logs=str(network.directory / "logs"),
        next=f"`syncline train get-run --task-id {args.task_id}` to follow it, "
        "`syncline network wait` until it is done",
    )
    return 0


def _agent_row(agent: Any) -> dict[str, Any]:
    return {
        "name": agent.name,
        "dev_account": agent.dev_account,
        "address": agent.address,
        "pid": agent.pid,
        "alive": agent.alive,
        "exit_code": agent.exit_code(),
        "metrics": f"http://127.0.0.1:{agent.metrics_port}/metrics",
        "log": agent.log,
    }


def cmd_network_status(args: argparse.Namespace) -> int:
    agents = _local_network().agents()
    print(json.dumps([_agent_row(a) for a in agents], indent=2))
    return 0 if agents and all(a.alive for a in agents) else 1


def cmd_network_wait(args: argparse.Namespace) -> int:
    """Until every agent has exited (the run sealed, everyone claimed), logging the run's progress."""
    network = _local_network()
    task_id = json.loads(network.file.read_text())["task_id"] if network.file.exists() else None
    market: MarketClient | None = None

    def progress() -> str | None:
        nonlocal market
        if task_id is None:
            return None
        if market is None:
            market = MarketClient.from_deployment(Deployment.read(default_deployment_path()))
        return run_progress(market.task(task_id), market.spec_tuple(task_id), pending_time(market.w3))

    agents = network.wait(timeout_s=args.timeout_s, progress=progress)
    print(json.dumps([_agent_row(a) for a in agents], indent=2))
    return 0


def cmd_network_down(args: argparse.Namespace) -> int:
    stopped = _local_network().down()
    log.info("network.down" if stopped else "network.not_running", stopped=",".join(stopped))
    return 0


# ---------------------------------------------------------------------- api


def api_settings_from_args(args: argparse.Namespace) -> ApiSettings:
    """The API's settings from ``syncline api``'s options (``--data-dir`` wins over
    ``$SYNCLINE_API_DATA_DIR``)."""
    from syncline.api import ApiSettings

    blob_store = blob_store_from_args(args, "the API serves artifacts from a blob store")
    if not 0 <= args.port < 65536:
        raise SynclineError(f"--port {args.port} must be within 0..65535")
    data_dir: Path | None = args.data_dir.expanduser().resolve() if args.data_dir is not None else None
    if data_dir is not None and data_dir.exists() and not data_dir.is_dir():
        raise SynclineError(f"--data-dir {args.data_dir} is a file; give a directory (created if missing)")
    return ApiSettings(
        deployment=args.deployment,
        blob_store=blob_store,
        rpc_url=args.rpc_url,
        db_url=args.db,
        host=args.host,
        port=args.port,
        frontend_dir=args.frontend,
        data_dir=data_dir,
        sealing_keys=args.sealing_keys.expanduser().resolve() if args.sealing_keys is not None else None,
        allowed_hosts=tuple(getattr(args, "allowed_host", None) or ()),
    )


def cmd_api(args: argparse.Namespace) -> int:
    """Serve the sponsor API and web UI until Ctrl-C."""
    from syncline.api import ApiServer

    settings = api_settings_from_args(args)
    deployment = Deployment.read(settings.deployment)
    w3 = http_web3(settings.rpc_url or deployment.rpc_url)
    if w3.is_connected():  # a node down at start is the indexer's to wait for; a wrong address is not
        check_market(w3, deployment.market, deployment.court, source=str(settings.deployment))
    blob_store = settings.blob_store
    server = ApiServer(settings)
    url = server.start()
    log.info(
        "api.serving",
        url=url,
        market=server.services.deployment.market,
        blob_store=blob_store,
        data_dir=str(settings.source_dir),
    )
    print(url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


# ---------------------------------------------------------------------- parser


DEPLOYMENT_HELP = (
    "deployment.json naming the contracts and the chain (default: the local devnet's, "
    ".syncline/devnet/deployment.json; `syncline deploy` writes one for another chain)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="syncline", description="Syncline: verifiable decentralized training market")
    parser.add_argument("--log-level", default=None, help="debug, info, warning")
    sub = parser.add_subparsers(dest="command", required=True)

    devnet = sub.add_parser("devnet", help="local anvil devnet with the contracts deployed")
    dsub = devnet.add_subparsers(dest="action", required=True)
    up = dsub.add_parser(
        "up", help="start anvil + contracts + blob service, or restart whichever died (same port, same state)"
    )
    up.add_argument(
        "--port", type=int, default=None, help="anvil's JSON-RPC port (default: 8545, or the port it ran on before)"
    )
    up.add_argument(
        "--clock-speed",
        type=float,
        default=DEFAULT_DEVNET_CLOCK_SPEED,
        help="the devnet's chain time runs this many times the wall's, so production windows (a "
        f"15-minute challenge window) pass in seconds (default {DEFAULT_DEVNET_CLOCK_SPEED:g}; 1: the wall's pace)",
    )
    up.set_defaults(func=cmd_devnet_up)
    dsub.add_parser("down", help="stop the devnet and discard its chain").set_defaults(func=cmd_devnet_down)
    dsub.add_parser(
        "status", help="each service: alive, pid, URL, answering (exit 0 up, 1 degraded, 3 down)"
    ).set_defaults(func=cmd_devnet_status)

    deploy = sub.add_parser("deploy", help="deploy the contracts (SynclineCourt, then SynclineMarket) to any EVM RPC")
    deploy.add_argument("--rpc-url", required=True, help="the chain's JSON-RPC URL")
    deploy.add_argument(
        "--out",
        type=Path,
        default=Path(".syncline/deployments/custom"),
        help="directory for deployment.json and the client ABI (default .syncline/deployments/custom)",
    )
    add_key_options(deploy)
    deploy.set_defaults(func=cmd_deploy)

    demo = sub.add_parser("demo", help="the main job: devnet, contracts, a whole training run, the receipt")
    demo.add_argument(
        "--scenario",
        choices=["training", "lifecycle", "sft-lora", *MODALITY_SCENARIOS, "fraud", *FRAUD_SCENARIOS],
        default="training",
        help="training: real DiLoCo run (default); lifecycle: scripted market walk-through, no training; "
        "sft-lora: LoRA fine-tuning of a locally pretrained model on a JSONL instruction set; "
        "vision: a ViT on the digits; timeseries: a PatchTST forecaster on packaged series; "
        "confidential: sealed shards, attested enclaves, a refused enrollment; "
        "dp: the language task with differential privacy (DP-SGD, ε per trainer and round in the receipt); "
        "fraud: every fraud scenario in turn; or one fraud scenario by name",
    )
    chain = demo.add_argument_group("--scenario lifecycle on any EVM chain (real clock, standard JSON-RPC only)")
    chain.add_argument("--rpc-url", default=None, help="the chain's JSON-RPC URL (default: a local anvil)")
    chain.add_argument(
        "--deployment", type=Path, default=None, help="deployment.json of the contracts there (default: deploy them)"
    )
    chain.add_argument(
        "--real-clock", action="store_true", help="no time travel on the local anvil either (it mines a block a second)"
    )
    chain.add_argument(
        "--round-duration",
        type=int,
        default=60,
        help="seconds per round on the real clock (grace and challenge windows as long; default 60)",
    )
    add_key_options(demo)
    demo.add_argument(
        "--ui-port",
        type=int,
        default=8600,
        help="port of the sponsor web UI + API served during the training run (0: any free port; -1: no UI)",
    )
    demo.set_defaults(func=cmd_demo)

    api = sub.add_parser("api", help="the sponsor API and web UI (indexes the market's events)")
    api.add_argument("--deployment", type=Path, default=default_deployment_path(), help=DEPLOYMENT_HELP)
    api.add_argument("--rpc-url", default=None, help="override the deployment's RPC URL")
    api.add_argument("--blob-store", default=None, help="blob service URL (default: the devnet's blobstore.json)")
    api.add_argument("--db", default=None, help="SQLAlchemy URL (default: sqlite:///.syncline/api/index.db)")
    api.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes the API to the network)",
    )
    api.add_argument("--port", type=int, default=8600, help="0 picks a free port")
    api.add_argument("--frontend", type=Path, default=None, help="built web UI (default: frontend/dist)")
    api.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the only directory a web client's data source or pretrained model may name "
        "(default: $SYNCLINE_API_DATA_DIR, else .syncline/data)",
    )
    api.add_argument(
        "--sealing-keys",
        type=Path,
        default=None,
        help="Confidential tasks: the sponsor's data-key store (a file, or the directory post-task wrote) that "
        "POST /api/runs/{id}/sealed-manifest/build wraps from; password from $SYNCLINE_SEALING_PASSWORD "
        "(default: $SYNCLINE_SEALING_KEYS; unset: the endpoint answers 503)",
    )
    api.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="another Host a state-changing request may name (a reverse proxy's name, the vite dev server "
        "127.0.0.1:5173); repeatable; also $SYNCLINE_API_ALLOWED_HOSTS (default: only 127.0.0.1/localhost "
        "with this server's port: other Hosts get 421, foreign Origins 403)",
    )
    api.set_defaults(func=cmd_api)

    for role, func, modes in (
        ("trainer", cmd_trainer_run, list(TRAINER_MISBEHAVIOURS)),
        ("witness", cmd_witness_run, list(WITNESS_MISBEHAVIOURS)),
        ("challenger", cmd_challenger_run, []),
    ):
        agent = sub.add_parser(role, help=f"the {role} agent")
        asub = agent.add_subparsers(dest="action", required=True)
        run = asub.add_parser("run", help=f"run the {role} until the task is sealed and paid")
        run.add_argument("--config", type=Path, required=True, help=f"{role}.yaml")
        run.add_argument("--task-id", type=int, default=None, help="override the config's task_id")
        run.add_argument(
            "--dev-account",
            type=int,
            default=None,
            help=f"sign with this anvil development account of the local devnet instead of the config's key "
            f"(never logged; {DEV_ACCOUNTS})",
        )
        if modes:
            run.add_argument(
                "--misbehave", choices=modes, default=None, help="TESTS AND DEMOS ONLY: act dishonestly in this way"
            )
        run.set_defaults(func=func)

    network = sub.add_parser(
        "network", help="a local network of agents on the devnet: the task's trainers and witnesses, one command"
    )
    nsub = network.add_subparsers(dest="action", required=True)
    nup = nsub.add_parser(
        "up",
        help="start the task's trainers (free dev accounts: 1-3) and witnesses (the dev accounts it names: 4-6), "
        "detached, each with its own config, state_dir, metrics port and log under .syncline/network/",
    )
    nup.add_argument("--task-id", type=int, default=1, help="the task the agents work on (default 1)")
    nup.add_argument("--trainers", type=int, default=None, help="how many trainers (default: the task's max_trainers)")
    nup.add_argument(
        "--trainer-config",
        type=Path,
        default=repo_root() / "examples" / "trainer.yaml",
        help="trainer config every trainer starts from (default examples/trainer.yaml)",
    )
    nup.add_argument(
        "--witness-config",
        type=Path,
        default=repo_root() / "examples" / "witness.yaml",
        help="witness config every witness starts from (default examples/witness.yaml)",
    )
    nup.set_defaults(func=cmd_network_up)
    nsub.add_parser("status", help="each agent: pid, alive, exit code, metrics URL, log").set_defaults(
        func=cmd_network_status
    )
    nwait = nsub.add_parser(
        "wait", help="until every agent has exited (the run sealed and everyone claimed); fails if one failed"
    )
    nwait.add_argument("--timeout-s", type=float, default=None, help="give up after this many seconds (default: never)")
    nwait.set_defaults(func=cmd_network_wait)
    nsub.add_parser("down", help="stop every agent of the local network").set_defaults(func=cmd_network_down)

    account = sub.add_parser(
        "account", help="an account's wallet balance, withdrawable credit, and what each task credited it"
    )
    account.add_argument("--address", required=True, help="the account (0x...)")
    account.add_argument("--deployment", type=Path, default=default_deployment_path(), help=DEPLOYMENT_HELP)
    account.add_argument("--rpc-url", default=None, help="override the deployment's RPC URL")
    account.set_defaults(func=cmd_account)

    train = sub.add_parser("train", help="sponsor and trainer commands against a deployment")
    tsub = train.add_subparsers(dest="action", required=True)

    def chain_cmd(
        name: str, func: Any, help_: str, *, task: bool = True, signer: bool = False
    ) -> argparse.ArgumentParser:
        p = tsub.add_parser(name, help=help_)
        p.add_argument("--deployment", type=Path, default=default_deployment_path(), help=DEPLOYMENT_HELP)
        p.add_argument("--rpc-url", default=None, help="override the deployment's RPC URL")
        if task:
            p.add_argument("--task-id", type=int, required=True, help="the task's id on chain (`list-runs`)")
        if signer:
            add_key_options(p)
        p.set_defaults(func=func)
        return p

    post = chain_cmd(
        "post-task",
        cmd_post_task,
        "post a task from a YAML spec and escrow its pool",
        task=False,
        signer=True,
    )
    post.add_argument("--spec", required=True, help="task spec YAML")
    post.add_argument(
        "--spec-uri", default=None, help="http(s) URL of the spec artifact (default: publish it to --blob-store)"
    )
    post.add_argument(
        "--blob-store",
        default=None,
        help="blob service URL to publish the spec and its artifacts (default: the devnet's blob service)",
    )
    install_sealed = chain_cmd(
        "install-sealed-manifest",
        cmd_install_sealed_manifest,
        "Confidential task: wrap the data keys to newly admitted enclaves and install the new sealed manifest",
        signer=True,
    )
    install_sealed.add_argument(
        "--keys", type=Path, default=None, help="the sponsor's data-key store (default: the one post-task wrote)"
    )
    install_sealed.add_argument("--blob-store", default=None, help="blob service URL (default: the devnet's)")
    install_sealed.add_argument(
        "--bind-keys",
        action="store_true",
        help="first bind an unbound data-key store (written before stores were bound) to this task's "
        "on-chain sponsor (your key) and attestation policy; a build refuses an unbound store",
    )
    get_sealed = chain_cmd("get-sealed-manifest", cmd_get_sealed_manifest, "Confidential task: the sealed manifest")
    get_sealed.add_argument("--blob-store", default=None, help="blob service URL (default: the devnet's)")
    get_sealed.add_argument("--full", action="store_true", help="print every envelope")
    chain_cmd("list-runs", cmd_list_runs, "list every task", task=False)
    get_run = chain_cmd("get-run", cmd_get_run, "status, rounds and trainer metrics of a task")
    get_run.add_argument("--format", choices=["json"], default="json", help="output format (json only)")
    chain_cmd("get-receipt", cmd_get_receipt, "the TrainingReceipt of a task")
    chain_cmd("enroll-trainer", cmd_enroll, "bond the stake and enroll", signer=True)
    chain_cmd("seal", cmd_seal, "seal a completed run after its challenge window", signer=True)
    chain_cmd("claim", cmd_claim, "withdraw this account's credit", task=False, signer=True)
    chain_cmd(
        "start-run",
        cmd_start_run,
        "start a run whose enrollment deadline passed with at least min_trainers (anyone may)",
        signer=True,
    )
    chain_cmd(
        "cancel-underfilled",
        cmd_cancel_underfilled,
        "cancel a task whose enrollment deadline passed under min_trainers (anyone may): refunds become credit",
        signer=True,
    )
    submit = chain_cmd("submit-gradient", cmd_submit_gradient, "commit a quantized gradient payload", signer=True)
    submit.add_argument("--payload", required=True, help="safetensors file from syncline.protocol.quantization")
    submit.add_argument("--blob-store", required=True, help="blob service URL to publish the payload")
    submit.add_argument("--round", type=int, default=None, help="default: the open round")
    submit.add_argument(
        "--checkpoint-root",
        required=True,
        help="0x Merkle root of your published inner-loop checkpoint manifest (syncline.protocol.checkpoints); "
        "training-fraud referees re-execute against it",
    )
    finalize = chain_cmd("finalize-round", cmd_finalize_round, "cast a witness vote by hand", signer=True)
    finalize.add_argument("--round", type=int, required=True, help="the round voted on")
    finalize.add_argument("--state-root", required=True, help="0x root of the state after the round")
    finalize.add_argument("--aggregate-root", required=True, help="0x root of the aggregated update")
    finalize.add_argument("--accepted-mask", type=lambda v: int(v, 0), required=True, help="e.g. 0b111 or 7")
    download = chain_cmd("download-model", cmd_download_model, "the final model as a Hugging Face directory")
    download.add_argument("--out", required=True, help="output directory (save_pretrained layout)")
    download.add_argument("--blob-store", default=None, help="blob service URL (default: the devnet's blob service)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # inside the try: a reader that went away is seen here, not at exit
        return code
    except BrokenPipeError:
        return _reader_went_away()
    except SynclineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _reader_went_away() -> int:
    """The command's output was piped into a reader that stopped reading (``| head``): that is
    not an error. Point stdout at /dev/null so the interpreter's final flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


if __name__ == "__main__":
    sys.exit(main())
