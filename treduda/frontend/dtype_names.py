"""The element types and precisions by name, without numpy (:mod:`.dtypes` has their rules):
what the command line offers before it imports anything heavy."""

DTYPES = ("float32", "float64", "complex64", "complex128", "int32", "int64", "float16",
          "bfloat16")
HIGHEST, TF32, TF32X3 = "highest", "tf32", "3xtf32"
PRECISIONS = (HIGHEST, TF32, TF32X3)
