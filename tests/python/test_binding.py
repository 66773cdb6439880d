"""The Python binding (python/ernie_image) over the build tree's libernie-image.so, with Debian's python3,
python3-numpy and python3-pil: the tiny model gives the CLI's pixels (txt2img, batch, img2img), each image
carries its seed and parameters, numpy arrays come back without PIL, the library is found or the error says
where it looked, every C error is an ErnieError with its message, bad arguments are Python exceptions, and
the package builds a wheel. JPEG/WebP outputs of the CLI are read back by PIL (an independent EXIF reader).
Env (CTest): PYTHONPATH (build/python), ERNIE_CLI, ERNIE_TEST_DATA."""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from PIL import Image

import ernie_image

CLI = os.environ["ERNIE_CLI"]
TINY = os.path.join(os.environ["ERNIE_TEST_DATA"], "tiny-ernie-image", "model")


def cli(*args):
    r = subprocess.run([CLI, "generate", "--model", TINY, "-p", "a cat", "--device", "cpu", "--threads", "1",
                        "-W", "16", "-H", "16", "--steps", "2", "-q", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(r.stdout + r.stderr)


class Binding(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.pipe = ernie_image.Pipeline(TINY, device="cpu", threads=1)

    @classmethod
    def tearDownClass(cls):
        cls.pipe.close()
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_same_pixels_as_the_cli(self):
        cli("--seed", "3", "-n", "blurry", "--cfg", "2.5", "-o", self.path("cli.png"))
        out = self.pipe("a cat", "blurry", num_inference_steps=2, guidance_scale=2.5, seed=3, width=16, height=16)
        self.assertEqual(len(out.images), 1)
        img = out[0]
        self.assertIsInstance(img, Image.Image)
        with Image.open(self.path("cli.png")) as ref:
            self.assertEqual(np.asarray(img).tolist(), np.asarray(ref.convert("RGB")).tolist())
        self.assertEqual(img.info["seed"], 3)
        p = img.info["parameters"]
        self.assertEqual((p["prompt"], p["negative_prompt"], p["seed"], p["num_inference_steps"]), ("a cat", "blurry", 3, 2))
        # our names too, and another sampler
        cli("--seed", "4", "--sampler", "dpmpp_2m", "-o", self.path("dpm.png"))
        img = self.pipe("a cat", steps=2, seed=4, size=(16, 16), sampler="dpmpp_2m")[0]
        with Image.open(self.path("dpm.png")) as ref:
            self.assertEqual(img.tobytes(), ref.convert("RGB").tobytes())

    def test_batch_and_random_seed(self):
        cli("--seed", "5", "--batch", "2", "-o", self.path("b%d.png"))
        out = self.pipe("a cat", steps=2, seed=5, size=(16, 16), batch=2)
        self.assertEqual(len(out), 2)
        for k, img in enumerate(out):
            with Image.open(self.path(f"b{k}.png")) as ref:
                self.assertEqual(img.tobytes(), ref.convert("RGB").tobytes())
            self.assertEqual(img.info["parameters"]["batch_index"], k)
        a = self.pipe("a cat", steps=1, size=(16, 16))[0]
        self.assertIsInstance(a.info["seed"], int)
        b = self.pipe("a cat", steps=1, size=(16, 16), seed=a.info["seed"])[0]
        self.assertEqual(a.tobytes(), b.tobytes())

    def test_img2img_and_inpainting_match_the_cli(self):
        init = Image.fromarray(np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3))
        init.save(self.path("init.png"))
        mask = Image.new("L", (16, 16), 0)
        mask.paste(255, (0, 0, 8, 16))
        mask.save(self.path("mask.png"))
        cli("--seed", "6", "-i", self.path("init.png"), "--strength", "0.5", "-o", self.path("i2i.png"))
        img = self.pipe("a cat", steps=2, seed=6, image=init, strength=0.5)[0]
        with Image.open(self.path("i2i.png")) as ref:
            self.assertEqual(img.tobytes(), ref.convert("RGB").tobytes())
        self.assertTrue(img.info["parameters"]["img2img"])
        cli("--seed", "7", "-i", self.path("init.png"), "--mask", self.path("mask.png"), "-o", self.path("inp.png"))
        for m in (mask, np.asarray(mask), self.path("mask.png")):  # a PIL image, an [H, W] array, a path
            img = self.pipe("a cat", steps=2, seed=7, image=np.asarray(init), mask_image=m)[0]
            with Image.open(self.path("inp.png")) as ref:
                self.assertEqual(img.tobytes(), ref.convert("RGB").tobytes())

    def test_jpeg_and_webp_outputs_carry_a1111_parameters_in_exif(self):
        cli("--seed", "8", "-o", self.path("p.png"))
        with Image.open(self.path("p.png")) as png:
            params = png.text["parameters"]
        self.assertIn("Seed: 8,", params)
        for name, fmt in (("j.jpg", "JPEG"), ("w.webp", "WEBP")):
            cli("--seed", "8", "--quality", "95", "-o", self.path(name))
            with Image.open(self.path(name)) as im:
                self.assertEqual(im.format, fmt)
                comment = im.getexif().get_ifd(0x8769)[0x9286]
                self.assertEqual(comment[:8], b"UNICODE\0")
                self.assertEqual(comment[8:].decode("utf-16-be"), params)

    def test_numpy_arrays_without_pil(self):
        code = ("import sys; sys.modules['PIL'] = None\n"
                "import ernie_image, numpy as np\n"
                f"p = ernie_image.Pipeline({TINY!r}, device='cpu', threads=1)\n"
                "a = p('a cat', steps=2, seed=3, size=(16, 16))[0]\n"
                "assert isinstance(a, ernie_image.ImageArray) and a.dtype == np.uint8 and a.shape == (16, 16, 3)\n"
                "assert a.info['seed'] == 3 and a.info['parameters']['seed'] == 3\n"
                "sys.stdout.buffer.write(a.tobytes())\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stdout, self.pipe("a cat", steps=2, seed=3, size=(16, 16))[0].tobytes())

    def test_library_lookup(self):
        env = dict(os.environ, ERNIE_IMAGE_LIBRARY="/nonexistent/libernie-image.so.0")
        r = subprocess.run([sys.executable, "-c", "import ernie_image; ernie_image.Pipeline('x')"], env=env,
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/nonexistent/libernie-image.so.0 (no such file)", r.stderr)
        self.assertIn("ERNIE_IMAGE_LIBRARY", r.stderr)
        from ernie_image import _build_tree
        self.assertTrue(ernie_image.version(_build_tree.LIBRARY).startswith("0."))
        with self.assertRaisesRegex(OSError, "no such file"):
            ernie_image.Pipeline(TINY, library="/nonexistent/lib.so")

    def test_c_errors_are_exceptions_with_the_message(self):
        with self.assertRaisesRegex(ernie_image.ErnieError, "/nonexistent-model"):
            ernie_image.Pipeline("/nonexistent-model", device="cpu")
        with self.assertRaisesRegex(ernie_image.ErnieError, "sampler"):
            self.pipe("a cat", steps=1, size=(16, 16), sampler="nope")
        with self.assertRaisesRegex(ernie_image.ErnieError, "multiple of"):
            self.pipe("a cat", steps=1, size=(17, 16))
        with self.assertRaisesRegex(ernie_image.ErnieError, "differs from the init image"):
            self.pipe("a cat", steps=1, image=np.zeros((16, 16, 3), np.uint8), mask=np.zeros((32, 32), np.uint8))
        with self.assertRaises(ernie_image.ErnieError) as e:
            ernie_image.Pipeline(TINY, device="tpu")
        self.assertEqual(e.exception.status, 1)

    def test_bad_arguments_raise_and_never_crash(self):
        p = self.pipe
        for kwargs, exc in [({"steps": "2"}, TypeError), ({"steps": 2**40}, ValueError), ({"seed": -5}, ValueError),
                            ({"seed": 2**64}, ValueError), ({"guidance_scale": float("nan")}, ValueError),
                            ({"size": 16}, TypeError), ({"size": (16, 16), "width": 16}, TypeError),
                            ({"steps": 1, "num_inference_steps": 1}, TypeError), ({"mask": np.zeros((16, 16), np.uint8)}, ValueError),
                            ({"image": np.zeros((16, 16), np.float32)}, ValueError),
                            ({"image": np.zeros((16, 16, 3), np.float32)}, TypeError), ({"image": 3}, TypeError),
                            ({"loras": "x.safetensors"}, TypeError), ({"loras": [3]}, TypeError),
                            ({"negative_prompt": b"x"}, TypeError)]:
            with self.assertRaises(exc, msg=str(kwargs)):
                p("a cat", **kwargs)
        with self.assertRaises(TypeError):
            p(None)
        with self.assertRaises(ValueError):
            p("a\0cat")
        with self.assertRaisesRegex(ValueError, "offload"):
            ernie_image.Pipeline(TINY, offload="sometimes")
        with self.assertRaisesRegex(ernie_image.ErnieError, "LoRA|lora"):
            p("a cat", steps=1, size=(16, 16), loras=[("/nonexistent/a.safetensors", 0.5)])

    def test_progress_callback_cancels_and_reraises(self):
        phases = []
        self.pipe("a cat", steps=2, seed=1, size=(16, 16), callback=lambda ph, s, t, e: phases.append(ph))
        self.assertIn("denoise", phases)
        with self.assertRaises(ernie_image.ErnieCancelled):
            self.pipe("a cat", steps=2, size=(16, 16), callback=lambda ph, s, t, e: ph == "denoise")

        def boom(*_):
            raise KeyError("from the callback")
        with self.assertRaisesRegex(KeyError, "from the callback"):
            self.pipe("a cat", steps=2, size=(16, 16), callback=boom)
        q = ernie_image.Pipeline(TINY, device="cpu", threads=1)
        q.close()
        with self.assertRaisesRegex(ernie_image.ErnieError, "closed"):
            q("a cat")

    def test_builds_a_wheel_with_setuptools(self):
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(ernie_image.__file__)))
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                            "-q", "-w", self.tmp.name, pkg], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wheels = [f for f in os.listdir(self.tmp.name) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        import zipfile
        names = zipfile.ZipFile(os.path.join(self.tmp.name, wheels[0])).namelist()
        self.assertIn("ernie_image/__init__.py", names)
        self.assertIn("ernie_image/_build_tree.py", names)


if __name__ == "__main__":
    unittest.main(verbosity=2)
