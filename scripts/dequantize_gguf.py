#!/usr/bin/env python3
"""Writes a GGUF whose block-quantized tensors are expanded to f32.

    python3 scripts/dequantize_gguf.py IN.gguf OUT.gguf

Every metadata key is copied as it is (general.file_type is set to 0, all
f32) and every tensor keeps its name, shape and order; Q4_1, Q8_0, ... tensors
become their dequantized f32 values (gguf-py's dequantize, llama.cpp's
arithmetic), float tensors are copied. kiln-compile --quant-method=gptq|awq
quantizes float weights: this makes a float model of a quantized GGUF (the
SmolLM2 GGUF setup.sh fetches is Q4_1), whose values are the Q4_1 model's.
"""
import argparse
import os

import gguf
import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    args = parser.parse_args()

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    reader = gguf.GGUFReader(args.input)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(args.output, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the writer writes the header and the architecture itself
        if name == "general.file_type":
            writer.add_file_type(0)
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub_type)

    float_types = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                   gguf.GGMLQuantizationType.BF16}
    for tensor in reader.tensors:
        # tensor.shape is ggml's ne[] (innermost first); numpy's is reversed.
        shape = [int(d) for d in reversed(tensor.shape)]
        if tensor.tensor_type in float_types:
            values = np.asarray(tensor.data).reshape(shape)
        else:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
            values = np.ascontiguousarray(values, dtype=np.float32)
        writer.add_tensor(tensor.name, values)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
