"""`/docs` (Swagger UI) and `/redoc` served with their assets from this server: both load on a
machine with no route to a CDN. The assets ship in the `fastapi-offline` package (MIT)."""

from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS_URL = "/docs-assets"


def assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def add_docs(app: FastAPI) -> None:
    """Routes for the two documentation pages and their three assets (the app is made with
    `docs_url=None, redoc_url=None`)."""
    files = {path.name: path for path in assets_dir().iterdir() if path.suffix in (".js", ".css", ".png")}

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            # No call to the public validator service: the page needs nothing outside this server.
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js", redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )

    @app.get(ASSETS_URL + "/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in files:
            raise HTTPException(404, f"no asset {name}")
        # The assets change only with the package: cached for a day.
        return FileResponse(files[name], headers={"Cache-Control": "public, max-age=86400"})
