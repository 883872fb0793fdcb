"""The element types, precisions and casting rules by name, without numpy (:mod:`.dtypes` has
their rules): what the command line and :class:`treduda.Options` offer before they import
anything heavy."""

DTYPES = ("float32", "float64", "complex64", "complex128", "int32", "int64", "float16",
          "bfloat16")
HIGHEST, TF32, TF32X3 = "highest", "tf32", "3xtf32"
PRECISIONS = (HIGHEST, TF32, TF32X3)
# casting= levels, weakest first, as numpy spells them (np.can_cast)
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
DEFAULT_CASTING = "safe"
