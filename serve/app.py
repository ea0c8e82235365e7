"""The HTTP API (FastAPI) over a `Service`, and the web page at `/`.

Errors are one envelope, `{"error": {"code", "message"}}`: 400 a request vidax-gen would refuse (its
message), 401 a missing or wrong token, 404 an unknown job, 409 a job not in a state for that (content
of an unfinished job, cancelling a finished one), 413 a body or upload over the limit, 429 the queue
full, 503 the model failed to load or warm up (and 411 a POST whose body size is not given).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import shutil
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from vidax.serve import store as jobs
from vidax.serve.requests import IMAGE, RequestError, family_flags, upload_roles
from vidax.serve.service import Service, public
from vidax.translator import VidaxError

STATIC = Path(__file__).parent / "static"
TOKEN_COOKIE = "vidax_token"
OPEN_PATHS = ("/health",)  # answered without the token
# Swagger UI's scripts and styles, served by the server itself: FastAPI's default /docs loads them from a CDN,
# which leaves the page blank on machines that reach no internet (and would send the page's visit elsewhere).
DOCS_ASSETS = "/docs-assets"
JSON_BODY_LIMIT = 64 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def envelope(status: int, message: str) -> JSONResponse:
    code = HTTPStatus(status).phrase.lower().replace(" ", "_")
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(service: Service, *, token: str | None = None, max_upload_bytes: int = 32 * 2**20) -> FastAPI:
    """The API and page for `service`; starts its worker with the app and stops it after."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        yield
        await asyncio.to_thread(service.stop)

    app = FastAPI(title="vidax-serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description=f"Video generation with {service.server.model}; jobs by id.")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _install_docs(app)
    _install_guards(app, token, max_upload_bytes)
    _install_errors(app)
    _install_routes(app, service, max_upload_bytes)
    return app


def _install_docs(app: FastAPI) -> None:
    """The OpenAPI docs at /docs, every file of the page from this server."""
    import fastapi_offline  # only for the Swagger UI 5 files it packages (OpenAPI 3.1, as FastAPI writes)

    app.mount(DOCS_ASSETS, StaticFiles(directory=Path(fastapi_offline.__file__).parent / "static"), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title}: API",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png")


def _install_guards(app: FastAPI, token: str | None, max_upload_bytes: int) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next):
        length = request.headers.get("content-length", "")
        if request.method == "POST" and not length.isdigit():  # a body of unknown size is not read at all
            return envelope(411, "give the body's Content-Length")
        if length.isdigit() and int(length) > max_upload_bytes + JSON_BODY_LIMIT:
            return envelope(413, f"request body over {max_upload_bytes + JSON_BODY_LIMIT} bytes")
        if token is None or request.url.path in OPEN_PATHS:
            return await call_next(request)
        given = _bearer(request) or request.cookies.get(TOKEN_COOKIE) or ""
        from_query = request.url.path == "/" and request.query_params.get("token")
        if from_query:
            given = from_query
        if not hmac.compare_digest(given.encode(), token.encode()):
            return envelope(401, "this server needs its token: 'Authorization: Bearer TOKEN' (the page: /?token=TOKEN)")
        response = await call_next(request)
        if from_query:  # the page's own requests (fetch, EventSource, <video>) carry it from now on
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError):
        return envelope(err.status, err.message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        return envelope(err.status_code, str(err.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path"))
        return envelope(400, f"{where}: {first.get('msg', 'invalid request')}".strip(": "))


def _install_routes(app: FastAPI, service: Service, max_upload_bytes: int) -> None:
    def found(job_id: str) -> dict:
        status = service.status(job_id) if re.fullmatch(r"[0-9a-f]{16}", job_id) else None
        if status is None:
            raise ApiError(404, f"no job {job_id!r}")
        return status

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    @app.get("/health")
    async def health():
        body = {"status": service.state, "model": service.server.model, "queued": service.store.count(jobs.QUEUED),
                "running": service.running, "error": service.error}
        return JSONResponse(body, status_code=503 if service.state == "failed" else 200)

    @app.get("/v1/models")
    async def models():
        return {"data": [await asyncio.to_thread(describe_model, service)]}

    @app.post("/v1/videos", status_code=202, openapi_extra=REQUEST_SCHEMA)
    async def submit(request: Request):
        if service.state == "failed":
            raise ApiError(503, f"the model failed to load: {service.error}")
        if service.stopping.is_set():
            raise ApiError(503, "the server is stopping")
        if service.queue_full():
            raise ApiError(429, f"the queue is full ({service.max_queue} jobs waiting); try again later")
        job_id = jobs.new_id()
        folder = service.uploads / job_id
        try:
            fields, uploads = await _read_request(request, service, folder, max_upload_bytes)
            await asyncio.to_thread(service.submit, fields, uploads, job_id)
        except VidaxError as err:
            shutil.rmtree(folder, ignore_errors=True)
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ApiError(400, message.replace(f"{folder}/", "")) from None
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return {"id": job_id, "status": jobs.QUEUED}

    @app.get("/v1/videos")
    async def listing(limit: int = 20, before: int | None = None):
        if not 1 <= limit <= 100:
            raise ApiError(400, "limit must be between 1 and 100")
        records = service.store.page(limit, before)
        data = [service.status(record["id"]) for record in records]
        return {"data": data, "next": records[-1]["seq"] if len(records) == limit else None}

    @app.get("/v1/videos/{job_id}")
    async def status(job_id: str):
        return found(job_id)

    @app.get("/v1/videos/{job_id}/events")
    async def events(job_id: str, request: Request):
        found(job_id)
        return StreamingResponse(_event_stream(service, job_id, request), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})

    @app.get("/v1/videos/{job_id}/content")
    async def content(job_id: str, variant: str = "video"):
        status = found(job_id)
        if status["status"] != jobs.SUCCEEDED:
            raise ApiError(409, f"job {job_id} is {status['status']}, it has no video")
        if variant not in ("video", "sidecar"):
            raise ApiError(400, f"variant must be video or sidecar, got {variant!r}")
        if variant == "sidecar":
            return public(json.loads(service.sidecar_path(job_id).read_text()), service.server.model)
        video = service.video_path(job_id)
        kind = "video/mp4" if video.suffix == ".mp4" else "application/octet-stream"
        return FileResponse(video, media_type=kind, filename=video.name, content_disposition_type="inline")

    @app.delete("/v1/videos/{job_id}", status_code=202)
    async def cancel(job_id: str):
        found(job_id)
        outcome = service.cancel(job_id)
        if outcome is None:
            raise ApiError(409, f"job {job_id} has already ended ({found(job_id)['status']})")
        return {"id": job_id, "status": outcome}


async def _event_stream(service: Service, job_id: str, request: Request):
    """The job's status as Server-Sent Events whenever it changes (each step of a run), until it ends
    (a comment every 10 s keeps idle connections open)."""
    last, quiet, seen = None, 0.0, 0
    while not await request.is_disconnected():
        # The trail is read after the status: a job publishes every step before it ends, so when the status says
        # it ended the trail is whole, and its last steps (as the running job's) go out ahead of its final state.
        status = service.status(job_id)
        steps = service.progress_since(job_id, seen)
        seen += len(steps)
        shown = status if status["status"] in ("running", "cancelling") else _as_running(status)
        for progress in steps:  # every state published since the last poll, however fast the steps
            last = json.dumps({**shown, "progress": progress})
            yield f"event: status\ndata: {last}\n\n"
        text = json.dumps(status)
        if not steps and text != last:
            yield f"event: status\ndata: {text}\n\n"
            last, quiet = text, 0.0
            if status["status"] in jobs.FINISHED:
                return
        elif quiet > 10:
            yield ": waiting\n\n"
            quiet = 0.0
        await asyncio.sleep(0.1)
        quiet += 0.1


def _as_running(status: dict) -> dict:
    """An ended job's status as it stood while it ran: for the steps it published before it ended."""
    return {**{k: v for k, v in status.items() if k != "content"}, "status": "running", "finished": None}


async def _read_request(request: Request, service: Service, folder: Path, max_upload_bytes: int):
    """The request's fields and its uploads saved under `folder` (by role; the client's file name is not used)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        body = await request.body()
        if len(body) > JSON_BODY_LIMIT:
            raise ApiError(413, f"JSON body over {JSON_BODY_LIMIT} bytes")
        return _json_object(body), {}
    if kind != "multipart/form-data":
        raise RequestError("send the request as application/json, or multipart/form-data with uploads")
    form = await request.form(max_part_size=JSON_BODY_LIMIT)
    fields, files = {}, {}
    roles = await asyncio.to_thread(upload_roles, service.server)
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name not in roles and name != "image":
                raise RequestError(f"{service.server.model} takes no upload {name!r} (it takes: "
                                   f"{', '.join(roles) or 'none'})")
            files.setdefault(name, []).append(value)
        elif name == "request":
            fields.update(_json_object(value.encode()))
        else:
            fields[name] = _form_value(value)
    image = {"flag": "--image", "kind": IMAGE, "multiple": False}  # a model without one refuses it in `check`
    uploads = {name: await _save_uploads(given, folder, name, roles.get(name, image), max_upload_bytes)
               for name, given in files.items()}
    return fields, uploads


async def _save_uploads(given: list[UploadFile], folder: Path, role: str, how: dict, limit: int):
    """One role's files, saved: one file as `ROLE.ext`; a repeatable flag's as `ROLE-i.ext` in the order sent (a
    tuple); several images for any other flag as the frames `ROLE/00000.ext`... ranked by their file names."""
    if how["multiple"]:
        paths = [await _save_upload(upload, folder / f"{role}-{i}", role, limit) for i, upload in enumerate(given)]
        return tuple(paths)
    if len(given) == 1:
        path = await _save_upload(given[0], folder / role, role, limit)
        await asyncio.to_thread(_check_upload, path, how["kind"])
        return path
    if how["kind"] == IMAGE:
        raise RequestError(f"{how['flag']} takes one image, got {len(given)} files")
    frames = folder / role
    ranked = sorted(range(len(given)), key=lambda i: given[i].filename or "")  # as vidax-gen sorts a frame folder
    for rank, i in enumerate(ranked):
        path = await _save_upload(given[i], frames / f"{rank:05d}", role, limit)
        await asyncio.to_thread(_check_upload, path, IMAGE)
    return frames


def _json_object(body: bytes) -> dict:
    try:
        value = json.loads(body)
    except ValueError as err:
        raise RequestError(f"the body is not JSON ({err})") from None
    if not isinstance(value, dict):
        raise RequestError("the body must be a JSON object")
    return value


def _form_value(text: str):
    """A form field: a JSON number or boolean as such, anything else the string."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float, bool)) else text


async def _save_upload(upload: UploadFile, stem: Path, role: str, limit: int) -> Path:
    """The file at `stem` plus the client file name's suffix (a known-safe one, else none)."""
    suffix = Path(upload.filename or "").suffix.lower()
    suffix = suffix if re.fullmatch(r"\.[a-z0-9]{1,5}", suffix) else ""
    stem.parent.mkdir(parents=True, exist_ok=True)
    path = stem.with_name(stem.name + suffix)
    size = 0
    with path.open("wb") as out:
        while chunk := await upload.read(1 << 20):
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"upload {role!r} is over {limit} bytes")
            out.write(chunk)
    return path


def _check_upload(path: Path, kind: str) -> None:
    """An image upload decodes as one; a family flag's file is read (and refused with vidax-gen's line) by the
    family's own reader in `check`, as vidax-gen reads it."""
    from vidax.zoo.video_io import read_image

    if kind == IMAGE:
        read_image(path)


def describe_model(service: Service) -> dict:
    """The served model: its defaults, the request fields it takes (its family's too) and its uploads."""
    from vidax.serve.requests import COMMON_FIELDS, LORA_FIELD, build_options, check
    from vidax.zoo.registry import lookup

    model = service.server.model
    entry = lookup(model)
    defaults = check(build_options(service.server, {"prompt": ""}, {}, service.partial / "defaults.mp4"))
    flags = [{"field": flag.field, "flag": flag.name, "kind": flag.kind.__name__, "help": flag.help,
              "multiple": flag.multiple} for flag in family_flags(model) if flag.kind is not Path]
    return {"id": model, "family": entry.family, "description": entry.description, "defaults": defaults,
            "fields": list(COMMON_FIELDS) + ([LORA_FIELD] if service.server.lora else []), "family_fields": flags,
            "uploads": upload_roles(service.server)}


REQUEST_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "required": ["prompt"], "properties": {
        "prompt": {"type": "string"}, "negative_prompt": {"type": "string"}, "height": {"type": "integer"},
        "width": {"type": "integer"}, "frames": {"type": "integer"}, "steps": {"type": "integer"},
        "guidance": {"type": "number"}, "shift": {"type": "number"}, "sampler": {"type": "string"},
        "fps": {"type": "number"}, "seed": {"type": "integer"},
        "lora_strength": {"oneOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}],
                          "description": "strengths of the server's --lora LoRAs (one for all, or one each); 0: off"},
        "format": {"type": "string", "enum": ["mp4", "npy"], "description": "npy: float32 frames [F, H, W, 3]"}},
        "additionalProperties": True, "description": "the model's own fields too (GET /v1/models)"}},
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "request": {"type": "string", "description": "the JSON request"},
        "image": {"type": "string", "format": "binary"}},
        "additionalProperties": {"type": "array", "items": {"type": "string", "format": "binary"}},
        "description": "uploads by field (GET /v1/models: `uploads`): an image field takes one image; a "
                       "repeatable flag's field several files, in the order sent; any other file field one "
                       "file, or several images as the frames of a clip, in the order of their file names"}}}}}
