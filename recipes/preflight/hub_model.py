"""A model named by hub id (Qwen/Qwen2.5-3B-Instruct) is checked before anything starts: asked of the hub when the
node may reach it, looked up in the local Hugging Face cache when it may not (HF_HUB_OFFLINE=1) or when the hub does
not answer; one line says which was asked. A typo (Qwen/Qwen2.5-3b-instruct) would otherwise fail only in the
workers, minutes after Ray started. The one network call of a dry run, and only with the hub reachable and allowed.
"""

from __future__ import annotations

import difflib
import os

from recipes.models import ModelSource, cached_model_ids, known_hub_ids, qwen25_hub_ids
from recipes.preflight.findings import Report

HUB_TIMEOUT_S = 10
TRUE = ("1", "true", "yes", "on")


def hub_offline(environ=None) -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (TRANSFORMERS_OFFLINE too, which transformers maps onto it)."""
    environ = os.environ if environ is None else environ
    return any(environ.get(name, "").strip().lower() in TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint(environ=None) -> str:
    environ = os.environ if environ is None else environ
    return (environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _did_you_mean(model: str) -> str:
    known = {m.lower(): m for m in [*qwen25_hub_ids(), *cached_model_ids()]}
    close = [known[m] for m in difflib.get_close_matches(model.lower(), list(known), n=1, cutoff=0.8)]
    return f": did you mean {close[0]}?" if close and close[0] != model else ""


def ask_hub(model: str, environ=None) -> tuple[str, str]:
    """("found", the hub's spelling) | ("missing", why) | ("unreachable", why), from the hub's model API."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        info = HfApi(endpoint=hub_endpoint(environ)).model_info(model, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        return "found", model  # it exists; its files need an accepted licence and HF_TOKEN
    except RepositoryNotFoundError:
        return "missing", "not a model"
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", "?")
        return "unreachable", f"HTTP {status}"
    except Exception as err:  # no route, DNS, timeout, proxy: the hub did not answer
        return "unreachable", f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}"
    return "found", str(getattr(info, "id", None) or model)


def check_hub_model(source: ModelSource, report: Report, environ=None, planning: bool = False) -> None:
    """`planning`: a dry run, which plans a model the recipe knows (the Qwen2.5 table) from its table where neither
    the cache nor the hub has it, saying it must be downloaded before the launch."""
    if source.local:
        return  # a folder: checks.check_model
    model = source.name
    endpoint = hub_endpoint(environ)
    cached = source.folder is not None
    if hub_offline(environ):
        asked = "HF_HUB_OFFLINE=1: the cache was asked, not the hub"
    else:
        answer, detail = ask_hub(model, environ)
        if answer == "found" and detail == model:
            report.note(f"model: {model} is a model on the hub ({endpoint})")
            return
        if answer == "found":
            report.error(f"actor_rollout_ref.model.path: the hub ({endpoint}) spells {model} as {detail}; set "
                         f"MODEL_PATH={detail} (another spelling downloads a second copy and names the run after it)")
            return
        if answer == "missing":
            report.error(f"actor_rollout_ref.model.path: {model} is {detail} on the hub ({endpoint}; a private one "
                         f"needs HF_TOKEN){_did_you_mean(model)}")
            return
        asked = f"the hub ({endpoint}) did not answer ({detail}), so the cache was asked"
    where = f"the local Hugging Face cache {source.cache}"
    if cached:
        report.note(f"model: {model} is in {where} ({asked})")
    elif planning and model in known_hub_ids():
        report.warn(f"model: {model} is not in {where} ({asked}): planned from the recipe's table of its size; "
                    f"download it before the launch, where the hub can be reached: hf download {model} (into "
                    f"{source.cache}, or set MODEL_PATH to a folder holding it)")
    else:
        guess = _did_you_mean(model)
        report.error(f"actor_rollout_ref.model.path: {model} is not in {where} ({asked}), so the launch could not "
                     f"load it{guess}{' Otherwise download' if guess else '; download'} it where the hub can be "
                     f"reached (hf download {model}) into this cache, or set MODEL_PATH to a model folder")
