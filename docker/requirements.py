"""Print the project's requirements (core + every extra `all` names), one a line, from
pyproject.toml alone: docker/Dockerfile installs them in a layer of their own, so that a code
change does not reinstall them. Usage: python requirements.py pyproject.toml [extra]"""

import re
import sys
import tomllib


def requirements(pyproject: str, extra: str = "all") -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    extras, seen, todo = project["optional-dependencies"], set(), [extra]
    found = list(project["dependencies"])
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            own = re.fullmatch(r"llmrl\[(.*)\]", req.replace(" ", ""))
            if own:  # llmrl[sim,llm,...]: the project's own extras
                todo.extend(own.group(1).split(","))
            else:
                found.append(req)
    return list(dict.fromkeys(found))


if __name__ == "__main__":
    print("\n".join(requirements(*sys.argv[1:])))
