"""``create_app``: the sponsor API under ``/api`` and the built web UI at ``/``.

Handlers are plain functions (FastAPI runs them in its thread pool, so a proof build or a model
export never blocks the event loop); they read the indexer's read models, and the chain or the
blob store only for what must be live (receipts, credits, proofs, downloads).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from syncline.api import payouts, queries
from syncline.api.artifacts import model_archive, state_blob
from syncline.api.challenges import build_challenge
from syncline.api.db import TaskRow
from syncline.api.errors import ApiError, error_response, install_error_handlers
from syncline.api.health import health
from syncline.api.metrics import CONTENT_TYPE_LATEST
from syncline.api.middleware import BodyLimit, RequestMetrics
from syncline.api.origin import OriginGuard, configured_hosts
from syncline.api.prepare import prepare_task
from syncline.api.schemas import (
    Account,
    AnyPrepareRequest,
    ApiConfig,
    ChallengeOut,
    ChallengeProof,
    ChallengeRequest,
    DevAccount,
    ErrorBody,
    Health,
    Losses,
    PreparedTask,
    Privacy,
    ReceiptOut,
    RoundOut,
    RunDetail,
    RunSummary,
    Template,
    TrainerOut,
    WitnessOut,
)
from syncline.api.sealed import (
    SealedBuildRequest,
    SealedManifestBuild,
    SealedManifestOut,
    authorised_sponsor,
    build_sealed_manifest,
    confidential_spec,
    seal_gate,
    sealed_manifest,
)
from syncline.api.services import ApiServices
from syncline.api.settings import ApiSettings
from syncline.api.stream import updates
from syncline.api.template import template

CATCH_UP_S = 5.0
MAX_TASK_ID = 2**63 - 1
"""Task ids are uint256 on chain; ids beyond SQLite's signed 64-bit integers are never indexed."""
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (404, 409, 413, 422, 429, 500, 502)}


def _address(value: str) -> str:
    text = value.strip()
    if not (text.startswith("0x") and len(text) == 42 and all(c in "0123456789abcdefABCDEF" for c in text[2:])):
        raise ApiError(422, f"address: {value!r} is not a 0x-prefixed 20-byte hex address")
    return text.lower()


def _root(value: str) -> str:
    text = value.strip().lower()
    if not (text.startswith("0x") and len(text) == 66 and all(c in "0123456789abcdef" for c in text[2:])):
        raise ApiError(422, f"root: {value!r} is not a 0x-prefixed 32-byte hex value")
    return text


def _task_row(services: ApiServices, task_id: int) -> TaskRow:
    """The indexed task, waiting briefly for the indexer if the chain already has it."""
    if not 1 <= task_id <= MAX_TASK_ID:  # the database's integers are 64-bit signed
        raise ApiError(404, f"unknown task id {task_id}")
    with services.db.session() as s:
        row = s.get(TaskRow, task_id)
    if row is None and task_id >= 1 and task_id <= services.market.task_count():
        services.indexer.wait_for_pass(CATCH_UP_S)
        with services.db.session() as s:
            row = s.get(TaskRow, task_id)
    if row is None:
        raise ApiError(404, f"unknown task id {task_id}")
    return row


def _routes(services: ApiServices) -> APIRouter:
    api = APIRouter(prefix="/api", responses=ERRORS)
    sealing = seal_gate(services)

    @api.get("/config", response_model=ApiConfig)
    def config() -> ApiConfig:
        accounts = services.dev_accounts()
        return ApiConfig(
            chain_id=services.chain_id,
            rpc_url=services.rpc_url,
            market=services.market.address.lower(),
            abi=services.abi,
            blob_store=services.blob_url,
            devnet=services.devnet,
            dev_accounts=[DevAccount(address=a, label=f"anvil #{i}") for i, a in enumerate(accounts)],
            head_block=int(services.w3.eth.block_number),
            indexed_block=services.indexer.indexed_block,
        )

    @api.get("/template", response_model=Template)
    def get_template() -> dict[str, Any]:
        return template(
            services.dev_accounts(), services.chain_time(), data_dir_configured=services.settings.data_dir_configured
        )

    @api.post("/tasks/prepare", response_model=PreparedTask)
    def prepare(body: AnyPrepareRequest, request: Request) -> PreparedTask:
        return prepare_task(services, body, request.client.host if request.client else "unknown")

    @api.get("/runs", response_model=list[RunSummary])
    def runs() -> list[RunSummary]:
        with services.db.session() as s:
            return queries.runs(s)

    @api.get("/runs/{task_id}", response_model=RunDetail)
    def run(task_id: int) -> RunDetail:
        row = _task_row(services, task_id)
        with services.db.session() as s:
            return queries.detail(s, row)

    @api.get("/runs/{task_id}/rounds", response_model=list[RoundOut])
    def rounds(task_id: int) -> list[RoundOut]:
        _task_row(services, task_id)
        now = services.chain_time()
        with services.db.session() as s:
            return queries.rounds(s, task_id, now)

    @api.get("/runs/{task_id}/trainers", response_model=list[TrainerOut])
    def trainers(task_id: int) -> list[TrainerOut]:
        _task_row(services, task_id)
        with services.db.session() as s:
            return queries.trainers(s, task_id)

    @api.get("/runs/{task_id}/witnesses", response_model=list[WitnessOut])
    def witnesses(task_id: int) -> list[WitnessOut]:
        _task_row(services, task_id)
        with services.db.session() as s:
            return queries.witnesses(s, task_id)

    @api.get("/runs/{task_id}/challenges", response_model=list[ChallengeOut])
    def challenges(task_id: int) -> list[ChallengeOut]:
        _task_row(services, task_id)
        with services.db.session() as s:
            return queries.challenges(s, task_id)

    @api.get("/runs/{task_id}/losses", response_model=Losses)
    def losses(task_id: int) -> Losses:
        _task_row(services, task_id)
        with services.db.session() as s:
            return queries.losses(s, task_id)

    @api.get("/runs/{task_id}/privacy", response_model=Privacy)
    def privacy(task_id: int) -> Privacy:
        _task_row(services, task_id)
        with services.db.session() as s:
            return queries.privacy(s, task_id)

    @api.get("/runs/{task_id}/receipt", response_model=ReceiptOut)
    def receipt(task_id: int) -> ReceiptOut:
        _task_row(services, task_id)
        with services.db.session() as s:
            return payouts.receipt(services.market, task_id, s)

    @api.get("/runs/{task_id}/sealed-manifest", response_model=SealedManifestOut)
    def get_sealed_manifest(task_id: int) -> SealedManifestOut:
        _task_row(services, task_id)
        return sealed_manifest(services, task_id)

    @api.post(
        "/runs/{task_id}/sealed-manifest/build",
        response_model=SealedManifestBuild,
        responses={code: {"model": ErrorBody} for code in (401, 403, 503)},
    )
    def sealed_manifest_build(
        task_id: int, request: Request, body: SealedBuildRequest | None = None
    ) -> SealedManifestBuild:
        _task_row(services, task_id)
        spec = confidential_spec(services, task_id)  # 404s and refusals below are not counted by the limit
        sponsor = authorised_sponsor(services, task_id, body)  # 401 / 403 / 409
        with sealing.build(request.client.host if request.client else "unknown"):
            return build_sealed_manifest(services, task_id, sponsor, spec)

    @api.get("/accounts/{address}", response_model=Account)
    def account(address: str) -> Account:
        return payouts.account(services.market, _address(address))

    @api.get(
        "/runs/{task_id}/state/{root}",
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}, "description": "the verified state blob"}},
    )
    def state(task_id: int, root: str) -> Response:
        row = _task_row(services, task_id)
        wanted = _root(root)
        with services.db.session() as s:
            known = queries.known_state_roots(s, row)
        if wanted not in known:
            raise ApiError(404, f"{wanted} is not a state root of task {task_id}")
        return Response(
            state_blob(services, wanted),
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="state-{wanted[2:18]}.safetensors"'},
        )

    @api.get(
        "/runs/{task_id}/model",
        response_class=FileResponse,
        responses={200: {"content": {"application/gzip": {}}, "description": "tar.gz of the model directory"}},
    )
    def model(task_id: int) -> FileResponse:
        _task_row(services, task_id)
        path, name = model_archive(services, task_id)
        return FileResponse(path, media_type="application/gzip", filename=name)

    @api.post("/runs/{task_id}/challenges/build", response_model=ChallengeProof)
    def challenge_build(task_id: int, body: ChallengeRequest) -> ChallengeProof:
        _task_row(services, task_id)
        return build_challenge(services, task_id, body)

    @api.get("/stream", response_class=StreamingResponse)
    async def stream(request: Request) -> StreamingResponse:
        return StreamingResponse(
            updates(request, lambda: services.indexer.indexed_block, services.stopping.is_set),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return api


def create_app(settings: ApiSettings, services: ApiServices | None = None) -> FastAPI:
    """The app for ``settings``; its lifespan runs the indexer thread. Raises ``SynclineError`` (one
    line) if the deployment, node or blob store settings are unusable."""
    services = services or ApiServices(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services.indexer.start()
        try:
            yield
        finally:
            services.close()

    app = FastAPI(
        title="Syncline sponsor API",
        version="1",
        description="Post training tasks, follow runs, build fraud proofs, download models (docs/api.md).",
        lifespan=lifespan,
    )
    app.state.services = services
    install_error_handlers(app)

    @app.get("/healthz", response_model=Health)
    def healthz() -> Health:
        return health(services.probe_w3, services.probe_blobs, services.indexer, max_lag_blocks=settings.max_lag_blocks)

    @app.get("/metrics", response_class=Response)
    def metrics() -> Response:
        services.metrics.observe_blocks(services.indexer.indexed_block, services.indexer.head_block)
        return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(_routes(services))
    static = settings.static_dir
    if (static / "index.html").is_file():
        app.mount("/", StaticFiles(directory=static, html=True), name="frontend")
    else:

        @app.get("/", include_in_schema=False)
        def no_frontend() -> Response:
            return error_response(
                404, f"the web UI is not built ({static} has no index.html): run `make install` to build frontend/dist"
            )

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    # every state-changing route: this server's Host (DNS rebinding, 421) and Origin (CSRF, 403)
    app.add_middleware(OriginGuard, bind_host=settings.host, extra=configured_hosts(settings.allowed_hosts))
    app.add_middleware(RequestMetrics, metrics=services.metrics)
    return app
