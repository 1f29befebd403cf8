"""Reference execution through ATen, the binding table, and meta-tensor inference."""
from . import aten, matmul  # noqa: F401 (their rules register in rules.RULES)
from .rules import RULES, evaluate_expr, evaluate_expr_into
from .binding import BindingTable, bind_inputs, local_shape
from .evaluator import EvalContext, Environment, evaluate_fusion, infer_meta, run_exprs
