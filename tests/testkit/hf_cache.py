"""Stand-ins for the Hugging Face hub: a local hub cache holding models' config.json as huggingface_hub lays it
out after a download (models--<org>--<name>/refs/main, snapshots/<revision>/), and a loopback HTTP server that
answers the hub's model API (GET /api/models/<org>/<name>) as huggingface_hub's client reads it: 200 with the
model's canonical id (the hub matches names regardless of case), else 401 with X-Error-Code RepoNotFound (what
the hub answers a client without a token for a model it does not have). Neither imports the recipe: the configs
below are the hub's config.json values of the Qwen2.5 -Instruct models, written out here."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"
_COMMON = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
           "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True}
QWEN25_INSTRUCT = {
    "Qwen/Qwen2.5-0.5B-Instruct": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                       num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                       tie_word_embeddings=True),
    "Qwen/Qwen2.5-1.5B-Instruct": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                       num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                                       tie_word_embeddings=True),
    "Qwen/Qwen2.5-3B-Instruct": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                                     num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                                     tie_word_embeddings=True),
    "Qwen/Qwen2.5-7B-Instruct": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                     num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                     tie_word_embeddings=False),
}


def write_cached_model(cache: Path, repo_id: str, config: dict) -> Path:
    """One model's config.json in a hub cache, as a download leaves it; returns the snapshot folder."""
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps({**_COMMON, **config}, indent=2))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def write_hub_cache(cache: Path, models: dict[str, dict] | None = None) -> Path:
    for repo_id, config in (QWEN25_INSTRUCT if models is None else models).items():
        write_cached_model(cache, repo_id, config)
    return Path(cache)


class HubAPI:
    """The hub's model API on 127.0.0.1, for HF_ENDPOINT; `asked` lists the ids it was asked about."""

    def __init__(self, models=tuple(QWEN25_INSTRUCT)):
        self.models = {m.lower(): m for m in models}
        self.asked: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                prefix = "/api/models/"
                path = self.path.split("?", 1)[0]
                repo_id = path[len(prefix):] if path.startswith(prefix) else ""
                if repo_id:
                    hub.asked.append(repo_id)
                canonical = hub.models.get(repo_id.lower()) if repo_id else None
                if canonical:
                    body = json.dumps({"id": canonical, "modelId": canonical, "sha": REVISION, "private": False,
                                       "tags": ["transformers"], "siblings": [{"rfilename": "config.json"}]})
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                elif repo_id:
                    body = json.dumps({"error": "Repository not found"})
                    self.send_response(401)
                    self.send_header("X-Error-Code", "RepoNotFound")
                    self.send_header("X-Error-Message", "Repository not found")
                    self.send_header("Content-Type", "application/json")
                else:  # the client's other routes: not what this stands in for
                    body = json.dumps({"error": "not here"})
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                data = body.encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
