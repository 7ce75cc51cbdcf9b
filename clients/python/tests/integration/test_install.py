"""The README's promise: installed the documented way (a venv with
--system-site-packages, pip install --no-build-isolation --no-index), the
README's first code block runs as written against a broker on
127.0.0.1:7711.  The broker is a real one on a free port; a relay on
127.0.0.1:7711 forwards to it (when 7711 is taken on this machine, the
example runs with the broker's address put in its place instead)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
import zipfile

from base import BrokerTest, stop_servers

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT = "127.0.0.1:7711"


def tearDownModule() -> None:
    stop_servers()


def debian_python() -> str:
    """The python3 the README's install line means (Debian's, with
    setuptools and wheel), else this one."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) \
        else sys.executable


class Relay:
    """127.0.0.1:7711 -> target, one thread per direction per connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 7711))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst),
                                 daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


class TestInstall(BrokerTest):
    def test_the_readme_example_runs_as_installed(self) -> None:
        with open(os.path.join(PKG, "README.md")) as f:
            readme = f.read()
        example = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
        self.assertIn(DEFAULT, example)
        self.assertLessEqual(len(example.strip().splitlines()), 10)
        tmp = tempfile.mkdtemp(prefix="lbc-venv-")
        self.addCleanup(shutil.rmtree, tmp, True)
        venv = os.path.join(tmp, "venv")
        subprocess.run([debian_python(), "-m", "venv",
                        "--system-site-packages", venv], check=True,
                       timeout=120)
        pip = subprocess.run(
            [os.path.join(venv, "bin", "pip"), "install", "--quiet",
             "--no-build-isolation", "--no-index", PKG],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=300, cwd=tmp)
        self.assertEqual(pip.returncode, 0, pip.stdout)
        addr = self.addr("b1")[0]
        try:
            relay = Relay(("127.0.0.1", int(addr.rsplit(":", 1)[1])))
            self.addCleanup(relay.close)
        except OSError:             # 7711 is taken here: use the address
            example = example.replace(DEFAULT, addr)
        script = os.path.join(tmp, "example.py")
        with open(script, "w") as f:
            f.write(example)
        run = subprocess.run([os.path.join(venv, "bin", "python"), script],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60, cwd=tmp)
        self.assertEqual(run.returncode, 0, run.stdout)
        self.assertRegex(run.stdout, r"holding orders:42, fencing token \d+\n"
                         r"released orders:42\n")
        # installed, not picked up from the source tree
        where = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import lockbroker; print(lockbroker.__file__)"],
            stdout=subprocess.PIPE, text=True, cwd=tmp, timeout=30).stdout
        self.assertIn(venv, where)

    def test_the_requirements_line_installs_the_built_wheel(self) -> None:
        """The README's line for a requirements.txt, with the wheel this
        package builds (pyproject.toml: setuptools and wheel, Python >=
        3.9) in a --find-links folder, into Debian's python3's venv."""
        with open(os.path.join(PKG, "README.md")) as f:
            readme = f.read()
        install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
        line = re.search(r"```text\n(.*?)```", install, re.S).group(1)
        self.assertRegex(line.strip(), r"^lockbroker\b")
        tmp = tempfile.mkdtemp(prefix="lbc-req-")
        self.addCleanup(shutil.rmtree, tmp, True)
        wheels = os.path.join(tmp, "wheels")
        run = subprocess.run(
            [debian_python(), "-m", "pip", "wheel", "--quiet",
             "--no-build-isolation", "--no-index", "--no-deps",
             "--wheel-dir", wheels, PKG],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=300, cwd=tmp)
        self.assertEqual(run.returncode, 0, run.stdout)
        wheel, = os.listdir(wheels)
        with zipfile.ZipFile(os.path.join(wheels, wheel)) as z:
            meta = z.read(next(n for n in z.namelist()
                               if n.endswith("/METADATA"))).decode()
        self.assertIn("Requires-Python: >=3.9", meta)
        venv = os.path.join(tmp, "venv")
        subprocess.run([debian_python(), "-m", "venv", venv], check=True,
                       timeout=120)
        with open(os.path.join(tmp, "requirements.txt"), "w") as f:
            f.write(line)
        pip = subprocess.run(
            [os.path.join(venv, "bin", "pip"), "install", "--quiet",
             "--no-index", "--find-links", wheels, "-r", "requirements.txt"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=300, cwd=tmp)
        self.assertEqual(pip.returncode, 0, pip.stdout)
        got = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import lockbroker; print(lockbroker.__version__)"],
            stdout=subprocess.PIPE, text=True, cwd=tmp, timeout=30).stdout
        self.assertEqual(got.strip(), "0.1.0")

    def test_the_sources_parse_as_python_3_9(self) -> None:
        """requires-python >= 3.9: no syntax of a later Python."""
        src = os.path.join(PKG, "src", "lockbroker")
        for name in sorted(os.listdir(src)):
            if name.endswith(".py"):
                with open(os.path.join(src, name)) as f:
                    ast.parse(f.read(), name, feature_version=(3, 9))


if __name__ == "__main__":
    unittest.main()
