"""Parts of a rollout that raise while one trajectory runs, each standing for a real way a trajectory fails; a test
loads the tools through verl's registry from a YAML (as any tool) and hands the server to the worker.

- `ReleaseRaisingCalculator`: the calculator, except that releasing an instance raises (a tool's lifecycle bug):
  verl awaits `tool.release` in a `finally` outside its own `except` (tool_agent_loop.py `_call_tool`);
- `ImageAnsweringCalculator`: answers with an image in a text-only run, which verl refuses with a ValueError in its
  tool-turn handling (`_handle_processing_tools_state`: no processor);
- `FailingRequestLLM`: the scripted LLM server (harness.standins.scripted_llm), except that a turn whose script text
  is SERVER_ERROR fails as a rollout server's request can (an HTTP 500, a dropped connection).
"""

from __future__ import annotations

from PIL import Image
from verl.tools.schemas import ToolResponse

from harness.standins.scripted_llm import ScriptedLLM
from tools.calculator import CalculatorTool

SERVER_ERROR = "<the rollout server fails this request>"


class ReleaseRaisingCalculator(CalculatorTool):
    async def release(self, instance_id: str, **kwargs) -> None:
        raise RuntimeError(f"could not release calculator instance {instance_id}")


class ImageAnsweringCalculator(CalculatorTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text="a picture of the answer", image=[Image.new("RGB", (2, 2))]), 0.0, {}


class FailingRequestLLM(ScriptedLLM):
    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs):
        if request_id not in self._scripts:
            self._scripts[request_id] = self.script_for(self.tokenizer.decode(prompt_ids))
        turn = self._turns.get(request_id, 0)
        script = self._scripts[request_id]
        if turn < len(script) and script[turn] == SERVER_ERROR:
            raise ConnectionError("the rollout server answered 500 Internal Server Error")
        return await super().generate(request_id=request_id, prompt_ids=prompt_ids,
                                      sampling_params=sampling_params, **kwargs)


class SpinningCalculator(CalculatorTool):
    """The calculator, except that its evaluation of "spin" busy-loops forever (testkit.pool_work.spin_on): a
    CPU-bound tool that no bound foresaw, run where the recipe runs the calculator's work."""

    WORK = "testkit.pool_work:spin_on"
